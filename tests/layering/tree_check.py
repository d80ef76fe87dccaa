"""What every check of the source tree's shape in this folder shares: the
self-test over a tree of planted files, and the command line.

A check is a function `find(root) -> (lines, files_read)`; each line names
one violation, starting with the file's path relative to `root`.
"""
import pathlib
import sys
import tempfile


def self_test(name, find, files, expected):
    """Writes `files` ({path: text}) into a new tree and checks that `find`
    reports exactly the lines that start with each of `expected`."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for path, text in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        found, _ = find(root)
    missing = [e for e in expected if not any(f.startswith(e) for f in found)]
    if missing or len(found) != len(expected):
        print(f"{name} self-test failed: found", found, "missing", missing)
        return 1
    print(f"{name} self-test: the check finds {len(expected)} of {len(expected)} planted "
          f"violations")
    return 0


def main(name, find, run_self_test, summary):
    """`CHECK.py [REPO_ROOT] | --self-test`: prints every violation and
    summary(count, files_read, root); exit status 1 when there is one."""
    if sys.argv[1:] == ["--self-test"]:
        return run_self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                        pathlib.Path(sys.argv[0]).resolve().parents[2])
    found, checked = find(root)
    for line in found:
        print(line)
    print(f"{name}: " + summary(len(found), checked, root))
    return 1 if found else 0

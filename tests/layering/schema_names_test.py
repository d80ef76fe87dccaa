#!/usr/bin/env python3
"""Names that cross a process boundary are built in one file each, beside
their page in schemas/ (docs/ARCHITECTURE.md): a string literal that spells
one anywhere else in the sources is a second owner of the contract, and this
test names it.

- Keys of the coordinator's key-value store: schemas/kv_keys.h/.cc (the page:
  schemas/kv_keys.md). A key literal starts with one of the scopes' prefixes
  ("job/", "host/", "cluster/") or holds one of the leaves that only keys
  have ("/ps-keys/", "/ps-clients/", "/lost_updates", "/registrations",
  "/trial/", "ckpt/", "/replan", "/consistency", "/search", "/resume",
  "/figures", "/calls/", "straggler/").
- Named values of a metric point: schemas/metric_names.h/.cc. A literal is
  one of "compute_ms", "dense_wait_ms", "sparse_wait_ms", "loss_mean" or ends
  in "_sent_bytes" or "_recv_bytes".

Comments and #include lines are not code and are skipped; so are tests
(which may spell a name to check the builders) and bench/.

Usage: schema_names_test.py [REPO_ROOT] | --self-test
"""
import re
import sys

import tree_check

FOLDERS = ("core", "coordinator", "agent", "ps", "trainer", "cli", "python", "tools", "schemas",
           "include")
SOURCES = (".cc", ".h", ".cpp", ".cu", ".py")
STARTS = ("job/", "host/", "cluster/")
LEAVES = ("/ps-keys/", "/ps-clients/", "/lost_updates", "/registrations", "/trial/", "ckpt/",
          "/replan", "/consistency", "/search", "/resume", "/figures", "/calls/", "straggler/")
METRICS = ("compute_ms", "dense_wait_ms", "sparse_wait_ms", "loss_mean")


def is_key(s):
    return s.startswith(STARTS) or any(leaf in s for leaf in LEAVES)


def is_metric(s):
    return s in METRICS or s.endswith(("_sent_bytes", "_recv_bytes"))


# (the owner's files, what its literals look like, what they are)
CONTRACTS = (
    (("schemas/kv_keys.h", "schemas/kv_keys.cc"), is_key, "a key-value key", "schemas/kv_keys.h"),
    (("schemas/metric_names.h", "schemas/metric_names.cc"), is_metric, "a metric point's value",
     "schemas/metric_names.h"),
)
LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
COMMENT_CC = re.compile(r"//.*?$|/\*.*?\*/", re.S | re.M)
COMMENT_PY = re.compile(r"#.*?$", re.M)
INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b.*$", re.M)


def literals(text, python, looks_like):
    """The string literals of `text` that `looks_like`, outside comments."""
    code = COMMENT_PY.sub("", text) if python else COMMENT_CC.sub(
        lambda m: re.sub(r"[^\n]", " ", m.group(0)), INCLUDE.sub("", text))
    found = []
    for m in LITERAL.finditer(code):
        s = m.group(1)
        if looks_like(s):
            line = code.count("\n", 0, m.start()) + 1
            found.append((line, s))
    return found


def violations(root):
    out, checked = [], 0
    for folder in FOLDERS:
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.suffix not in SOURCES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            checked += 1
            text = path.read_text(errors="replace")
            for owner, looks_like, what, header in CONTRACTS:
                if rel in owner:
                    continue
                for line, s in literals(text, path.suffix == ".py", looks_like):
                    out.append(f'{rel}:{line}: "{s}" spells {what}: build it with {header}')
    return out, checked


def self_test():
    """The check finds what it should, in a tree made for it."""
    files = {
        "core/a.cc": '#include "core/ps/search/x.h"\n'
                     'std::string k = "job/" + id;  // "job/<id>" in a comment is fine\n',
        "trainer/b.cc": 'auto k = prefix + "/registrations";\n/* "host/x" */\n',
        "python/c.py": 'key = "cluster/straggler/%d" % n  # "job/1"\n',
        "coordinator/d.cc": 'Log() << "a job/file message";\n',
        "schemas/kv_keys.cc": 'return "job/" + x;\n',
        "cli/e.cc": 'double w = v["dense_wait_ms"]; auto b = path + "_recv_bytes";\n',
        "schemas/metric_names.cc": 'return "compute_ms";\n',
    }
    expected = ['core/a.cc:2: "job/"', 'trainer/b.cc:1: "/registrations"',
                'python/c.py:1: "cluster/straggler/%d"', 'cli/e.cc:1: "dense_wait_ms"',
                'cli/e.cc:1: "_recv_bytes"']
    return tree_check.self_test("schema names", violations, files, expected)


if __name__ == "__main__":
    sys.exit(tree_check.main(
        "schema names", violations, self_test,
        lambda n, checked, root: f"{n} literal(s) of a name outside its owner in schemas/, "
                                 f"{checked} files read"))

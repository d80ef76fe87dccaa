#!/usr/bin/env python3
"""A benchmark reads what a user can read: `parallax status JOB --json` (and the
other commands of the CLI), the Thrift API or the Python package; never the
coordinator's SQLite database behind its back (bench/e2e/job_status.py reads a
job, a finished `parallax run`'s too). This test names every file under bench/
that could:

- a Python file that imports sqlite3 (`import sqlite3`, `from sqlite3 import
  ...`, or "sqlite3" as a string: importlib, the sqlite3 shell);
- any other file that spells sqlite3 (the C API, `<sqlite3.h>`, the shell);
- any file that names the coordinator's database file, "state.db", other than
  as the value of a coordinator's `--db` (the `--db` on the same line or the
  line before): a bench may start a coordinator on a database, and a finished
  run's state is read through one (job_status.served), but not open it.

ALLOWED names the files that may name it otherwise, each with its reason.
Byte code (__pycache__) is left out: it holds its source's strings.

Usage: bench_reads_test.py [REPO_ROOT] | --self-test
"""
import ast
import re
import sys

import tree_check

STATE_FILE = "state.db"
ALLOWED = {
    # It benchmarks the coordinator's store itself (coordinator/store): it fills a scratch
    # database of its own through SqliteStateStore before the coordinator it measures opens
    # it, in a directory it made for the run; it reads no coordinator's state.
    "bench/coordinator_load.cc": "preloads its own scratch database through coordinator/store",
}
SQLITE = re.compile(r"sqlite3")
DB_FLAG = re.compile(r"--db\b")


def python_sqlite(text):
    """(line, what) of each import of sqlite3 and each "sqlite3" string in Python `text`."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        return [(e.lineno or 1, f"does not parse as Python ({e.msg}), so its imports cannot be "
                                "checked")]
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        if any(n.split(".")[0] == "sqlite3" for n in names):
            found.append((node.lineno, "imports sqlite3"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and SQLITE.search(node.value):
            found.append((node.lineno, 'spells "sqlite3" in a string (importlib, the shell?)'))
    return found


def other_sqlite(text):
    """(line, what) of each line of a non-Python `text` that spells sqlite3."""
    return [(i, "spells sqlite3 (the C API, the sqlite3 shell?)")
            for i, line in enumerate(text.splitlines(), 1) if SQLITE.search(line)]


def state_file_names(text):
    """(line, what) of each mention of the state file that is not a `--db` value."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines, 1):
        for m in re.finditer(re.escape(STATE_FILE), line):
            before = (lines[i - 2] + "\n" if i > 1 else "") + line[:m.start()]
            if not DB_FLAG.search(before):
                found.append((i, f"names the coordinator's database ({STATE_FILE})"))
    return found


def violations(root):
    out, checked = [], 0
    base = root / "bench"
    if not base.is_dir():
        return out, checked
    for path in sorted(base.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue  # byte code holds its source's strings, checked in the source
        rel = path.relative_to(root).as_posix()
        checked += 1
        text = path.read_text(errors="replace")
        found = python_sqlite(text) if path.suffix == ".py" else other_sqlite(text)
        if rel not in ALLOWED:
            found += state_file_names(text)
        for line, what in sorted(found):
            out.append(f"{rel}:{line}: {what}: read jobs with `parallax status JOB --json` "
                       "(bench/e2e/job_status.py), not the coordinator's database")
    return out, checked


def self_test():
    """The check finds what it should, in a tree made for it."""
    files = {
        "bench/a/reader.py": "import json\nimport sqlite3\n",
        "bench/a/alias.py": "import os, sqlite3 as lite\n",
        "bench/a/from_reader.py": "from sqlite3 import connect\n",
        "bench/a/shelled.py": 'subprocess.run(["sqlite3", path, "SELECT 1"])\n',
        "bench/b/peek.sh": 'sqlite3 "$state/state.db" "SELECT step FROM metrics"\n',
        "bench/c/path.py": 'db = os.path.join(state, "state.db")  # for reading\n',
        "bench/c/api.cc": "#include <sqlite3.h>\n",
        "bench/d/broken.py": "def f(:\n",
        # A coordinator started on a database: allowed.
        "bench/e/starts.py": 'argv = [coordinator, "--db", os.path.join(d, "state.db")]\n',
        "bench/e/starts.cc": 'argv = {bin, "--listen", "127.0.0.1:0", "--db",\n'
                             '        dir + "/state.db"};\n',
        "bench/coordinator_load.cc": 'Preload(dir + "/state.db", n);\n',
        "bench/e/__pycache__/starts.cpython-311.pyc": '\x00os\x00state.db\x00sqlite3\n',
        # Outside bench/: not this check's.
        "tests/x/reads.py": "import sqlite3\n",
    }
    expected = ["bench/a/reader.py:2: imports sqlite3", "bench/a/alias.py:1: imports sqlite3",
                "bench/a/from_reader.py:1: imports sqlite3",
                'bench/a/shelled.py:1: spells "sqlite3"', "bench/b/peek.sh:1: spells sqlite3",
                "bench/b/peek.sh:1: names the coordinator's database",
                "bench/c/path.py:1: names the coordinator's database",
                "bench/c/api.cc:1: spells sqlite3", "bench/d/broken.py:1: does not parse"]
    return tree_check.self_test("bench reads", violations, files, expected)


if __name__ == "__main__":
    sys.exit(tree_check.main(
        "bench reads", violations, self_test,
        lambda n, checked, root: f"{n} way(s) around `parallax status` to the coordinator's "
                                 f"database under bench/, {checked} files read (allowed to name "
                                 "it: " + "; ".join(f"{k}, {v}" for k, v in ALLOWED.items())
                                 + ")"))

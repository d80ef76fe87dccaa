#!/usr/bin/env python3
"""Every key of the coordinator's key-value store is built in one file,
schemas/kv_keys.h/.cc (the page: schemas/kv_keys.md): a string literal that
spells a key, or a piece of one, anywhere else in the sources is a second
owner of the contract, and this test names it.

A key literal is a C++ or Python string literal that starts with one of the
scopes' prefixes ("job/", "host/", "cluster/") or holds one of the leaves
that only keys have ("/ps-keys/", "/ps-clients/", "/lost_updates",
"/registrations", "/trial/", "ckpt/", "/replan", "/consistency", "/search",
"/resume", "/figures", "/calls/", "straggler/"). Comments are not code and
are skipped; so are tests (which may spell a key to check the builders) and
bench/.

Usage: kv_keys_test.py [REPO_ROOT] | --self-test
"""
import re
import sys

import tree_check

FOLDERS = ("core", "coordinator", "agent", "ps", "trainer", "cli", "python", "tools", "schemas",
           "include")
SOURCES = (".cc", ".h", ".cpp", ".cu", ".py")
OWNER = ("schemas/kv_keys.h", "schemas/kv_keys.cc")
STARTS = ("job/", "host/", "cluster/")
LEAVES = ("/ps-keys/", "/ps-clients/", "/lost_updates", "/registrations", "/trial/", "ckpt/",
          "/replan", "/consistency", "/search", "/resume", "/figures", "/calls/", "straggler/")
LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
COMMENT_CC = re.compile(r"//.*?$|/\*.*?\*/", re.S | re.M)
COMMENT_PY = re.compile(r"#.*?$", re.M)
INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b.*$", re.M)


def key_literals(text, python):
    """The string literals of `text` that spell a key, outside comments."""
    code = COMMENT_PY.sub("", text) if python else COMMENT_CC.sub(
        lambda m: re.sub(r"[^\n]", " ", m.group(0)), INCLUDE.sub("", text))
    found = []
    for m in LITERAL.finditer(code):
        s = m.group(1)
        if s.startswith(STARTS) or any(leaf in s for leaf in LEAVES):
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
            if rel in OWNER:
                continue
            checked += 1
            text = path.read_text(errors="replace")
            for line, s in key_literals(text, path.suffix == ".py"):
                out.append(f'{rel}:{line}: "{s}" spells a key-value key: build it with '
                           f"schemas/kv_keys.h")
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
    }
    expected = ['core/a.cc:2: "job/"', 'trainer/b.cc:1: "/registrations"',
                'python/c.py:1: "cluster/straggler/%d"']
    return tree_check.self_test("kv_keys", violations, files, expected)


if __name__ == "__main__":
    sys.exit(tree_check.main(
        "kv_keys", violations, self_test,
        lambda n, checked, root: f"{n} key literal(s) outside schemas/kv_keys.* in {checked} files"))

#!/usr/bin/env python3
"""The layering of the source tree, checked on every #include:

- core/ includes nothing from the daemons (coordinator/, agent/, ps/),
  trainer/, cli/, tools/ or python/: it is the library everything else uses;
- the daemons and the trainer library do not include each other (they meet
  only through schemas/ and core/), and none of them includes cli/;
- the public headers (include/parallax/) include only each other and the
  standard library: what `cmake --install` ships is the API and nothing else;
- inside coordinator/, the rooms depend one way: store/ (the SQLite state)
  on no other room, orchestration/ on store/, service/ on orchestration/ and
  store/, web/ (the pages and /metrics) on service/ and store/; nothing
  includes web/ but the coordinator's main.cc, and every coordinator source
  is in a room but main.cc.

Usage: layering_test.py [REPO_ROOT]   (exit status 1 and a line per violation)
"""
import re
import sys

import tree_check

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
TOP = ("core", "coordinator", "agent", "ps", "trainer", "cli", "tools", "python", "schemas",
       "include", "tests", "bench", "examples")
# Folder -> the top-level folders its files may not include.
FORBIDDEN = {
    "core": {"coordinator", "agent", "ps", "trainer", "cli", "tools", "python"},
    "coordinator": {"agent", "ps", "trainer", "cli", "python"},
    "agent": {"coordinator", "ps", "trainer", "cli", "python"},
    "ps": {"coordinator", "agent", "trainer", "cli", "python"},
    "trainer": {"coordinator", "agent", "ps", "cli", "python"},
    "cli": {"coordinator", "agent", "ps", "python"},
    "tools": {"coordinator", "agent", "ps", "trainer", "cli", "python"},
}
SOURCES = (".h", ".hpp", ".cc", ".cpp", ".cu")
# coordinator/ room -> the rooms its files may include (besides its own).
ROOMS = {
    "store": set(),
    "orchestration": {"store"},
    "service": {"orchestration", "store"},
    "web": {"service", "store"},
}


def room_violation(rel, target):
    """Why the coordinator file `rel` may not include `target`, or None."""
    parts = rel.parts
    if len(parts) < 2 or parts[0] != "coordinator":
        return None
    into = target.split("/")
    if into[0] != "coordinator" or len(into) < 3:
        return None
    if len(parts) == 2:  # coordinator/main.cc: builds the rooms, may use them all
        return None
    room, other = parts[1], into[1]
    if other == room or other in ROOMS.get(room, set()):
        return None
    return f"coordinator/{room}/ may not depend on coordinator/{other}/"


def violations(root):
    """The violations under `root`, and how many source files were read."""
    out, checked = [], 0
    for path in sorted(root.rglob("*")):
        if path.suffix not in SOURCES or not path.is_file():
            continue
        rel = path.relative_to(root)
        top = rel.parts[0]
        if top.startswith("build") or top.startswith("."):
            continue
        checked += 1
        text = path.read_text(errors="replace")
        for kind, target in INCLUDE.findall(text):
            first = target.split("/")[0]
            if top == "include":
                if kind == '"' and not target.startswith("parallax/"):
                    out.append(f"{rel}: public header includes \"{target}\"; public headers "
                               f"include only include/parallax/ and the standard library")
                continue
            if kind == '"' and first in FORBIDDEN.get(top, ()):
                out.append(f"{rel}: includes \"{target}\"; {top}/ may not depend on {first}/")
            if kind == '"' and (why := room_violation(rel, target)):
                out.append(f"{rel}: includes \"{target}\"; {why}")
            if (kind == '"' and first == "coordinator" and target.split("/")[1] == "web"
                    and top != "coordinator" and top != "tests"):
                out.append(f"{rel}: includes \"{target}\"; only the coordinator uses its web room")
        if (top == "coordinator" and len(rel.parts) == 2 and rel.name != "main.cc"):
            out.append(f"{rel}: a coordinator source outside the rooms "
                       f"({', '.join(sorted(ROOMS))}); only main.cc stays at the top")
    return out, checked


def self_test():
    """The check finds what it should, in a tree made for it."""
    files = {
        "core/a/x.h": '#include "core/b/y.h"\n#include "trainer/z.h"\n',
        "ps/s.cc": '#include "core/a/x.h"\n#include "coordinator/c.h"\n',
        "include/parallax/p.h": '#include <vector>\n#include "parallax/q.h"\n'
                                '#include "core/a/x.h"\n',
        "cli/c.cc": '#include "trainer/t.h"\n',
        "coordinator/store/s.cc": '#include "coordinator/store/t.h"\n'
                                  '#include "coordinator/web/w.h"\n',
        "coordinator/web/w.cc": '#include "coordinator/service/v.h"\n'
                                '#include "coordinator/store/t.h"\n',
        "coordinator/loose.cc": '#include "coordinator/service/v.h"\n',
        "coordinator/main.cc": '#include "coordinator/web/w.h"\n',
    }
    expected = ["core/a/x.h: includes \"trainer/z.h\"", "ps/s.cc: includes \"coordinator/c.h\"",
                "include/parallax/p.h: public header includes \"core/a/x.h\"",
                "coordinator/store/s.cc: includes \"coordinator/web/w.h\"",
                "coordinator/loose.cc: a coordinator source outside the rooms"]
    return tree_check.self_test("layering", violations, files, expected)


if __name__ == "__main__":
    sys.exit(tree_check.main(
        "layering", violations, self_test,
        lambda n, checked, root: f"{n} violation(s) in {checked} files under {root}"))

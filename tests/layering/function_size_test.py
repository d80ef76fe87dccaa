#!/usr/bin/env python3
"""No function body over 100 lines in core/, the daemons, trainer/, cli/,
python/ and tools/ (tests and bench/ excepted): a long function is asking to
be split where it has seams.

A function body is a brace block opened, outside any other function, after
a parenthesised parameter list (constructors with initializer lists,
`const`, `override`, trailing return types included); namespaces, classes,
enums and initializers (`= {`) are not functions. Comments, string and
character literals are blanked first, so braces inside them do not count.

Usage: function_size_test.py [REPO_ROOT] | --self-test
"""
import pathlib
import re
import sys

LIMIT = 100
FOLDERS = ("core", "coordinator", "agent", "ps", "trainer", "cli", "python", "tools")
SOURCES = (".cc", ".h", ".cpp", ".cu")
NOT_FUNCTIONS = re.compile(r"^\s*(template\s*<.*>\s*)?(namespace|class|struct|union|enum|extern)\b")


def blank(text):
    """Comments and literals replaced by spaces, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'" and 0 < i < n - 1 and text[i - 1].isalnum() and text[i + 1].isalnum():
            out.append(c)  # a digit separator: 10'000
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def long_functions(path, text):
    code = blank(text)
    found = []
    stack = []  # per open brace: True when it opened a function body
    in_function = 0
    start = 0  # where the current declaration began
    body_line = 0
    for i, c in enumerate(code):
        if c == "{":
            head = code[start:i]
            is_function = (in_function == 0 and ")" in head and "=" not in head.split(")")[-1]
                           and not NOT_FUNCTIONS.match(head)
                           and not re.search(r"\b(if|for|while|switch|catch)\s*\(", head))
            stack.append(is_function)
            if is_function:
                in_function += 1
                body_line = code.count("\n", 0, i) + 1
                name = re.findall(r"([~\w:]+)\s*\(", head)
                body_name = name[0] if name else "?"
            start = i + 1
        elif c == "}":
            if stack and stack.pop():
                in_function -= 1
                end_line = code.count("\n", 0, i) + 1
                lines = end_line - body_line - 1
                if lines > LIMIT:
                    found.append(f"{path}:{body_line}: {body_name}: {lines} lines (limit {LIMIT})")
            start = i + 1
        elif c == ";":
            start = i + 1
    return found


def check(root):
    found = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in SOURCES and path.is_file():
                rel = path.relative_to(root)
                found += long_functions(rel, path.read_text(errors="replace"))
    return found


def self_test():
    body = "\n".join(f"  x += {i};" for i in range(LIMIT + 1))
    text = ("namespace a {\nstruct S {\n  int F() const {\n  return 1;\n  }\n};\n"
            f"int Long(int x) {{\n{body}\n  if (x) {{ return 2; }}\n  return x;\n}}\n"
            f"int Short(int x) {{ /* {{ */ auto s = \"}}\"; return x + 10'000 + '{{'; }}\n"
            "const int kT[] = {1, 2};\n}\n")
    found = long_functions("t.cc", text)
    if len(found) != 1 or "Long" not in found[0]:
        print("self-test failed:", found)
        return 1
    print("function size self-test: the check finds the one planted long function")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                        pathlib.Path(__file__).resolve().parents[2])
    found = check(root)
    for line in found:
        print(line)
    print(f"function size: {len(found)} function(s) over {LIMIT} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

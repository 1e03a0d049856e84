#!/usr/bin/env python3
"""embed_text.py IN OUT NAME - writes OUT, a C file defining
`const char NAME[]` (IN's bytes, NUL-terminated, one string literal per
line of IN) and `const size_t NAME_len`, so a text file in the tree
(daemon/dashboard.html) is built into the binary.  Run by meson at build
time."""
import sys


def literal(line):
    out = []
    for b in line:
        c = chr(b)
        if c in '"\\?':
            out.append("\\" + c)
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append("\\%03o" % b)  # always 3 digits: never runs on
    return '"' + "".join(out) + '"'


src, out, name = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(src, "rb").read()
body = "\n".join("    " + literal(l) for l in data.splitlines(True)) or '""'
with open(out, "w") as f:
    f.write("/* Generated from %s by daemon/embed_text.py: do not edit. */\n"
            % src.rsplit("/", 1)[-1])
    f.write("#include <stddef.h>\n\n")
    f.write("extern const char %s[];\nextern const size_t %s_len;\n"
            % (name, name))
    f.write("const char %s[] =\n%s;\n" % (name, body))
    f.write("const size_t %s_len = %d;\n" % (name, len(data)))

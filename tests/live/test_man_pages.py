#!/usr/bin/env python3
"""test_man_pages.py TRAINCTL TRAIND - the man pages and docs/trainctl.md
describe every command and option the built binaries offer.

Takes the commands from `trainctl --help`, each command's options from
`trainctl COMMAND --help`, traind's options and environment variables from
`traind --help`, and checks that man/trainctl.1 and man/traind.8 name
each one, that docs/trainctl.md has a section heading naming each
command, and that the bash completion (client/trainctl.bash) offers every
command and long option.  Prints what is missing; exits 1 if
anything is.
"""
import os
import re
import subprocess
import sys

ROOT = os.environ.get("TD_SOURCE_ROOT") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
trainctl, traind = sys.argv[1], sys.argv[2]


def helptext(*argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(argv)} exited {r.returncode}: {r.stderr}")
    return r.stdout


def page(rel, man):
    text = open(os.path.join(ROOT, rel), encoding="utf-8").read()
    if man:  # groff: \- is a minus, \fB..\fP are fonts
        text = text.replace("\\-", "-")
        text = re.sub(r"\\f[BIRP]", "", text)
    return text


def options(text):
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z1])\b", text))


missing = []
man1, man8 = page("man/trainctl.1", True), page("man/traind.8", True)
bash = page("client/trainctl.bash", False)
bash_cmds = re.search(r'local cmds="([^"]*)"', bash).group(1).split()
doc = "\n".join(l for l in page("docs/trainctl.md", False).split("\n")
                if l.startswith("## "))  # a section per command

top = helptext(trainctl, "--help")
commands = re.findall(r"^  ([a-z][a-z-]*) ", top.split("Commands:")[1], re.M)
if len(commands) < 10:
    sys.exit(f"FAIL: could not read the commands of trainctl --help:\n{top}")
for cmd in commands:
    for name, text in (("man/trainctl.1", man1), ("docs/trainctl.md", doc)):
        if not re.search(rf"(?<![\w-]){re.escape(cmd)}(?![\w-])", text):
            missing.append(f"{name}: command {cmd}")
    if cmd not in bash_cmds:
        missing.append(f"client/trainctl.bash: command {cmd}")
    text = helptext(trainctl, cmd, "--help")
    # options of traind that a help text mentions ("traind --help-config")
    for opt in sorted(options(text) - set(re.findall(r"traind\s+(--[a-z-]+)",
                                                       text))):
        if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", man1):
            missing.append(f"man/trainctl.1: {cmd} {opt}")
        if opt.startswith("--") and not re.search(
                rf"(?<![\w-]){re.escape(opt)}(?![\w-])", bash):
            missing.append(f"client/trainctl.bash: {cmd} {opt}")

dhelp = helptext(traind, "--help")
for opt in sorted(options(dhelp)):
    if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", man8):
        missing.append(f"man/traind.8: {opt}")
for var in sorted(set(re.findall(r"\b(TRAIND_SOCKET|TD_[A-Z_]+)\b", dhelp))):
    if var not in man8.split(".SH ENVIRONMENT")[-1]:
        missing.append(f"man/traind.8: environment {var}")
if "TRAIND_SOCKET" not in man1.split(".SH ENVIRONMENT")[-1]:
    missing.append("man/trainctl.1: environment TRAIND_SOCKET")

for m in missing:
    print("missing:", m)
print(f"man pages: {len(commands)} commands checked, {len(missing)} missing")
sys.exit(1 if missing else 0)

#!/usr/bin/env python3
"""test_doc_links.py - the documentation points at things that exist.

Checks, from the source root ($TD_SOURCE_ROOT, else this file's ../..):
  - every `docs/PAGE.md#anchor` cited in a code comment (lib, daemon,
    client, tests, kernels, config, meson.build files) and every markdown
    link [text](PAGE.md#anchor) in README.md, CONTRIBUTING.md, docs/ and
    the READMEs under tests/ and scripts/
    names an existing page and a heading of it (GitHub's anchors: the
    heading in lower case, punctuation dropped, spaces as hyphens);
  - every repository path written in backticks in those pages (lib/...,
    tests/..., daemon/..., ...; globs and {a,b} allowed) exists.
Prints each broken reference with where it is; exits 1 if there is one.
"""
import glob
import os
import re
import sys

ROOT = os.environ.get("TD_SOURCE_ROOT") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PAGES = ["README.md", "CONTRIBUTING.md"] + sorted(
    os.path.relpath(p, ROOT)
    for pattern in ("docs/*.md", "tests/**/*.md", "scripts/**/*.md")
    for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))
CODE_DIRS = ["lib", "daemon", "client", "tests", "kernels", "config"]
TOP = ("lib/", "tests/", "daemon/", "client/", "kernels/", "scripts/",
       "config/", "systemd/", "man/", "docs/")


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


_anchors = {}


def anchors(page):
    if page not in _anchors:
        found = set()
        path = os.path.join(ROOT, page)
        if os.path.exists(path):
            fence = False
            for line in open(path, encoding="utf-8"):
                if line.startswith("```"):
                    fence = not fence
                m = None if fence else re.match(r"#{1,6} (.*)", line)
                if m:
                    found.add(slug(m.group(1)))
        _anchors[page] = found
    return _anchors[page]


def expand(path):
    """{a,b} alternatives, then globs."""
    m = re.search(r"\{([^{}]*)\}", path)
    if m:
        return [q for alt in m.group(1).split(",")
                for q in expand(path[:m.start()] + alt + path[m.end():])]
    return [path]


def exists(path):
    return all(glob.glob(os.path.join(ROOT, p)) for p in expand(path))


errors = []


def check_ref(where, page, anchor):
    if not os.path.exists(os.path.join(ROOT, page)):
        errors.append(f"{where}: {page} does not exist")
    elif anchor and anchor not in anchors(page):
        errors.append(f"{where}: {page} has no heading for #{anchor}")


# 1. code comments citing docs
for d in CODE_DIRS:
    for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
        for f in files:
            if not f.endswith((".c", ".h", ".cu", ".json", ".sh", ".py",
                               ".build")):
                continue
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, ROOT)
            for n, line in enumerate(open(p, encoding="utf-8",
                                          errors="replace"), 1):
                for m in re.finditer(r"(docs/[a-z][\w.-]*\.md)(?:#([\w-]+))?", line):
                    check_ref(f"{rel}:{n}", m.group(1), m.group(2))

# 2. the pages: links and paths
for page in PAGES:
    path = os.path.join(ROOT, page)
    if not os.path.exists(path):
        continue
    base = os.path.dirname(page)
    fence = False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        where = f"{page}:{n}"
        for m in re.finditer(r"\]\(([^)\s]+)\)", line):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            file = os.path.normpath(os.path.join(base, file)) if file else page
            check_ref(where, file, anchor or None)
        if fence:
            continue
        for m in re.finditer(r"`([^`\s]+)`", line):
            t = m.group(1).rstrip(".,;:)")
            if (not t.startswith(TOP) or re.search(r"[<>]|\.\.\.|[A-Z]{2,}", t)
                    or "=" in t):
                continue
            t = t.split("#")[0]
            if not exists(t):
                errors.append(f"{where}: `{t}` does not exist")

for e in errors:
    print(e)
print(f"doc links: {len(errors)} broken reference(s)")
sys.exit(1 if errors else 0)

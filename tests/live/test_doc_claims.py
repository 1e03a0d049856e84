#!/usr/bin/env python3
"""test_doc_claims.py TRAINCTL TRAIND - what the docs say about the CLI,
the settings, the messages and the exit codes is what the built binaries
do.

test_man_pages.py checks one direction (every option the binaries offer
is documented); this checks the other, mechanically and in seconds:

- options: every option shown after `trainctl COMMAND` in a code span or
  code block of README.md, CONTRIBUTING.md, docs/*.md and the man pages
  is one `trainctl COMMAND --help` lists (or a global one), every
  `trainctl WORD` there names a command, and every option shown after
  `traind` is one `traind --help` lists;
- settings: every `#key = value` line of config/traind.conf is a setting
  of `traind --help-config --json` with that default, and names every
  setting; every `key = value` in a code span, every `trainctl config
  get|set KEY` and every "`key` (default)" the docs show names a setting,
  and the default given is its default;
- build options: README's table names every option of meson_options.txt
  with its default;
- metrics: every `traind_*` name of README, daemon, metrics and
  observability pages occurs in the source, and every `td_*` name the
  docs give is one in the source (a function renamed or removed);
- messages: every message quoted ("...") in the prose of the daemon,
  trainctl, pipeline, metrics, observability and checkpoints pages
  occurs in the source (daemon/, lib/, client/), its placeholders (N,
  PATH, <why>, ..., numbers) aside, except the few listed below that
  quote what an older traind said;
- exit codes: the documented codes of usage errors (2), an unreachable
  daemon (3) and traind's own (1, 2, 3), by running them (no daemon is
  started).

Prints each mismatch; exits 1 if there is any.
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.environ.get("TD_SOURCE_ROOT") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
trainctl, traind = sys.argv[1], sys.argv[2]
bad = []

# Quotes of what the code said before a fix (the page says so next to
# them): they are meant not to occur in the source any more.
HISTORICAL = {
    "0.0 samples/s",  # metrics.md: "it said ..."
    "verdict none",
    "read loss and metrics less often, avoid per-step synchronisation",
    "checkpoint ... is at the end of the job",  # daemon.md: "it was failed"
    "0 epochs, 0.0 samples/s",
    "training source: too many bad samples",  # pipeline.md: "it said"
}


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=30,
                          **kw)


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def man_text(rel):
    t = read(rel).replace("\\-", "-")
    return re.sub(r"\\f[BIRP]", "", t)


DOCS = (["README.md", "CONTRIBUTING.md"]
        + sorted(os.path.relpath(p, ROOT)
                 for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))))
MANS = ["man/trainctl.1", "man/traind.8"]


def code_of(md):
    """The code of a markdown page: fenced and indented blocks, line by
    line (backslash continuations joined), and inline code spans."""
    out, fenced = [], False
    prose = []
    for line in md.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            out.append(line)
        else:
            prose.append(line)
    blocks = re.sub(r"\\\n\s*", " ", "\n".join(out)).split("\n")
    blocks = [re.sub(r"(^|\s)#.*", "", b) for b in blocks]  # comments
    spans = re.findall(r"`([^`]+)`", re.sub(r"\s*\n\s*", " ",
                                           "\n".join(prose)))
    return blocks + spans


OPT = r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z1])(?![\w-])"


def options_after(text, prog):
    """(word, options) for each `prog WORD ...` in text; the options run
    until a shell separator or the end of the line."""
    for m in re.finditer(rf"(?<![\w/.-]){prog}((?:\s+--socket\s+\S+|"
                         rf"\s+--json)*)\s+([a-z-][a-z0-9-]*)([^\n]*)", text):
        rest = re.split(r"\s(?:\||;|#|&&|>)\s|\s#|[&;]$", m.group(3))[0]
        yield m.group(2), re.findall(OPT, rest), m.group(0)


# ---- options ---------------------------------------------------------
top = run([trainctl, "--help"]).stdout
commands = re.findall(r"^  ([a-z][a-z-]*) ", top.split("Commands:")[1], re.M)
helps = {c: run([trainctl, c, "--help"]).stdout for c in commands}
helps["ls"] = helps["queue"]
glob_opts = {"--socket", "--json", "--help", "-h"}
dhelp = run([traind, "--help"]).stdout
dopts = set(re.findall(OPT, dhelp)) | {"-h", "--help"}
n_opts = 0
for rel in DOCS + MANS:
    if rel.startswith("man/"):
        texts = [man_text(rel)]
    else:
        texts = code_of(read(rel))
    for text in texts:
        for word, opts, what in options_after(text, "trainctl"):
            if word.startswith("-"):
                continue
            if word not in helps:
                # prose in a man page ("trainctl itself"): code only
                if not rel.startswith("man/"):
                    bad.append(f"{rel}: no trainctl command {word!r}: "
                               f"{what.strip()[:80]}")
                continue
            for o in opts:
                n_opts += 1
                if o not in glob_opts and not re.search(
                        rf"(?<![\w-]){re.escape(o)}(?![\w-])", helps[word]):
                    bad.append(f"{rel}: trainctl {word} has no {o}: "
                               f"{what.strip()[:80]}")
        for m in re.finditer(r"(?<![\w/.-])traind((?:\s+-[-\w]+(?:\s+[^-\s]"
                             r"\S*)?)+)", text):
            for o in re.findall(OPT, re.split(r"\s(?:\||;|#|&&|>)\s",
                                              m.group(1))[0]):
                n_opts += 1
                if o not in dopts:
                    bad.append(f"{rel}: traind has no {o}: "
                               f"{m.group(0).strip()[:80]}")

# ---- settings --------------------------------------------------------
settings = {s["key"]: s for s in json.loads(
    run([traind, "--help-config", "--json"]).stdout)["settings"]}


def norm(v):
    """A setting's value as the config file parser takes it: JSON if it
    parses, else the text."""
    v = v.strip()
    try:
        return json.loads(v)
    except ValueError:
        return v


# the text listing: every setting, its default in one column
rows = [l for l in run([traind, "--help-config"]).stdout.split("\n")
        if re.match(r"  [a-z_]+ +default ", l)]
cols = {l.index(" default ") for l in rows}
if len(rows) != len(settings) or len(cols) != 1:
    bad.append(f"traind --help-config: {len(rows)} rows for {len(settings)} "
               f"settings, 'default' at columns {sorted(cols)}")

conf_keys = set()
for line in read("config/traind.conf").split("\n"):
    m = re.match(r"#([a-z_]+) =(.*)$", line)
    if not m:
        continue
    k, v = m.group(1), norm(m.group(2))
    conf_keys.add(k)
    if k not in settings:
        bad.append(f"config/traind.conf: no setting {k}")
    elif v != settings[k]["default"]:
        bad.append(f"config/traind.conf: {k} = {v!r}, but its default "
                   f"is {settings[k]['default']!r}")
for k in sorted(set(settings) - conf_keys):
    bad.append(f"config/traind.conf: setting {k} has no '#{k} = ' line")

# pages whose `key = value` spans are traind.conf lines (others show
# libjpeg's or PyTorch's)
DAEMON_PAGES = ("README.md", "docs/daemon.md", "docs/observability.md",
                "docs/metrics.md", "docs/trainctl.md", "docs/design.md",
                "docs/benchmarks.md")
UNITS = {"KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}
n_set = 0
for rel in DOCS + MANS:
    text = man_text(rel) if rel.startswith("man/") else read(rel)
    codes = [text] if rel.startswith("man/") else code_of(text)
    for c in codes:
        for m in re.finditer(r"trainctl config (?:get|set) ([a-z_]+)", c):
            n_set += 1
            if m.group(1) not in settings:
                bad.append(f"{rel}: trainctl config names no setting "
                           f"{m.group(1)!r}")
        m = re.fullmatch(r"\s*([a-z][a-z_]+[a-z]) = (\S*)\s*", c)
        if m and "_" in m.group(1) and rel in DAEMON_PAGES:
            n_set += 1
            if m.group(1) not in settings:
                bad.append(f"{rel}: `{c.strip()}` names no setting")
    if rel.startswith("man/"):
        continue
    # "`key` (default)": the documented default of a setting
    flat = re.sub(r"\s*\n\s*", " ", text)
    for m in re.finditer(r"`([a-z_]+)` \((?:default )?(`?)([^`,;)]+)\2[,;)]",
                         flat):
        k, v = m.group(1), m.group(3).strip()
        if k not in settings:
            continue
        mm = re.fullmatch(r"(\d+)(?: (KiB|MiB|GiB))?", v)
        if mm:
            got = int(mm.group(1)) * UNITS.get(mm.group(2), 1)
        elif v == "auto":
            got = "auto"
        else:
            continue
        n_set += 1
        if got != settings[k]["default"]:
            bad.append(f"{rel}: `{k}` ({v}), but its default is "
                       f"{settings[k]['default']!r}")

# ---- messages --------------------------------------------------------
src = []
for d in ("daemon", "lib", "client"):
    for p in glob.glob(os.path.join(ROOT, d, "**", "*.[ch]"), recursive=True):
        with open(p, encoding="utf-8", errors="replace") as f:
            src.append(f.read())
src = "\n".join(src)
src = re.sub(r'"\s*PRI[diux](?:64|32)\s*"', "d", src)  # %" PRId64 "
src = re.sub(r'"\s*\n\s*"', "", src)           # "abc "\n "def"
src = src.replace('\\"', '"')
src = re.sub(r"%[-+ #0-9.*]*(?:hh|h|ll|l|z|j)?[a-zA-Z]", "\x00", src)
# the literal text between conversions
lits = set()
for s in re.findall(r'"((?:[^"\\\n]|\\.)*)"', src):
    lits.update(x.strip() for x in s.split("\x00"))
lits.update(os.strerror(e) for e in range(1, 134))  # "%s: %s", strerror
PUNCT = re.compile(r"[:;,()]")
blob = PUNCT.sub("", "\x01".join(lits))

def found(frag):
    """A fragment occurs in a message of the source when it does as a
    whole (punctuation aside), or when each of its words but one in four
    (a %s there: a key, a file, a metric's name) lies in a run of 3
    words that does; one of fewer than 4 words, when each word does."""
    frag = PUNCT.sub("", frag)
    if frag in blob:
        return True
    words = frag.split()
    if len(words) < 4:  # a few words between placeholders
        return all(w in blob for w in words)
    covered = set()
    for i in range(len(words) - 2):
        if " ".join(words[i:i + 3]) in blob:
            covered.update((i, i + 1, i + 2))
    return len(words) - len(covered) <= max(1, len(words) // 4)


SPLIT = (r"\.\.\.|<[^>]*>|#|(?<!\w)/[\w./-]+|\b(?:N|M|K|T|X|PATH|DIR|FILE|uid N)\b"
         r"|\d+(?:[.,]\d+)*%?")
n_msg = 0
for rel in ("docs/daemon.md", "docs/trainctl.md", "docs/pipeline.md",
            "docs/metrics.md", "docs/observability.md",
            "docs/checkpoints.md"):
    t = read(rel)
    t = "\n".join(l for l in t.split("\n")
                  if not l.startswith(("    ", "|")))  # code, tables
    t = re.sub(r"```.*?```", "", t, flags=re.S)
    descs = re.findall(r'"desc":\s*"([^"]+)"', t)  # JSON examples' errors
    t = re.sub(r"`[^`]*`", lambda m: m.group(0) if '"' not in m.group(0)
               else "", t)                     # JSON in code spans
    t += " ".join(f'"{d}"' for d in descs)
    t = re.sub(r"\s*\n\s*", " ", t)
    for m in re.finditer(r'"([^"]{12,240}?)"', t):
        s = m.group(1).replace("`", "")
        if " " not in s or s in HISTORICAL:
            continue
        frags = [f.strip(" :;,.()") for f in re.split(SPLIT, s)]
        frags = [f for f in frags if len(f) >= 10]
        if not frags:
            continue
        n_msg += 1
        miss = [f for f in frags if not found(f)]
        if miss:
            bad.append(f'{rel}: quoted "{s[:90]}" does not occur in the '
                       f"source (no {miss[0]!r})")

# ---- build options (README's table against meson_options.txt) ---------
opts = {}
for m in re.finditer(r"option\('(\w+)',[^)]*?value: (\[[^\]]*\]|'[^']*')",
                     read("meson_options.txt"), re.S):
    v = m.group(2)
    opts[m.group(1)] = (",".join(re.findall(r"'([^']*)'", v))
                        if v.startswith("[") else v.strip("'"))
opts["werror"] = "false"  # meson's own
rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", read("README.md"), re.M)
for name, default in rows:
    n_set += 1
    if name not in opts:
        bad.append(f"README.md: build option {name} is not in "
                   f"meson_options.txt")
    elif default.startswith("`") and default.strip("` ") != opts[name]:
        bad.append(f"README.md: build option {name} defaults to "
                   f"{default.strip()}, meson_options.txt to {opts[name]!r}")
for name in sorted(set(opts) - {r[0] for r in rows}):
    bad.append(f"README.md: the options table lacks {name}")

# ---- Prometheus names -------------------------------------------------
for rel in ("README.md", "docs/observability.md", "docs/metrics.md",
            "docs/daemon.md"):
    for name in sorted(set(re.findall(r"`(traind_[a-z0-9_]+)",
                                      read(rel)))):
        n_msg += 1
        if name not in src:
            bad.append(f"{rel}: metric {name} does not occur in the source")

# ---- C names: every td_* function, type or variable the docs name -----
code = []
for d in ("lib", "daemon", "client", "kernels", "tests"):
    for p in glob.glob(os.path.join(ROOT, d, "**", "*"), recursive=True):
        if p.endswith((".c", ".h", ".cu", ".cuh", "meson.build")):
            with open(p, encoding="utf-8", errors="replace") as f:
                code.append(f.read())
idents = set(re.findall(r"\b(td_\w+)", "\n".join(code)))
PROFILED = {"td__region_index"}  # benchmarks.md: a perf profile's entry
for rel in DOCS + MANS:
    for name in sorted(set(re.findall(r"\b(td_\w*[a-z0-9])\b", read(rel)))):
        n_msg += 1
        if name not in idents and name not in PROFILED:
            bad.append(f"{rel}: {name} is not a name in the source")

# ---- exit codes ------------------------------------------------------
with tempfile.TemporaryDirectory() as tmp:
    nosock = os.path.join(tmp, "none.sock")
    env = dict(os.environ)
    env.pop("TRAIND_SOCKET", None)
    cases = [
        ([trainctl, "--socket", nosock, "queue"], 3,
         "docs/trainctl.md: 3 the daemon cannot be reached"),
        ([trainctl, "--socket", nosock, "queue", "--json"], 3,
         "docs/trainctl.md: 3, stderr only"),
        ([trainctl, "--socket", nosock, "queue", "--state", "x"], 2,
         "docs/trainctl.md: 2 a usage error, found before connecting"),
        ([trainctl, "--socket", "", "queue"], 2,
         "docs/trainctl.md: an empty --socket is a usage error"),
        ([trainctl, "no-such-command"], 2, "2 usage"),
        ([trainctl, "plan", "no-such-model"], 1,
         "docs/trainctl.md: plan exits 1 when the model cannot be built"),
        ([trainctl, "export", os.path.join(tmp, "none.st"), "-o",
          os.path.join(tmp, "o.st")], 1,
         "docs/trainctl.md: 1 a local operation failed"),
        ([traind, "--no-such-option"], 2, "man/traind.8: 2 usage"),
        ([traind, "--steps", "abc"], 2, "man/traind.8: 2 --steps abc"),
        ([traind, "--json"], 2, "man/traind.8: 2 --json without --run"),
        ([traind, "--run", os.path.join(tmp, "none.json")], 3,
         "man/traind.8: 3 the --run job's file does not parse"),
        ([traind, "--foreground", "--config", os.path.join(tmp, "no.conf"),
          "--socket", os.path.join(tmp, "d.sock"), "--state-dir",
          os.path.join(tmp, "st")], 1,
         "man/traind.8: 1 could not start (a --config FILE must exist)"),
    ]
    for argv, want, why in cases:
        r = run(argv, env=env, stdin=subprocess.DEVNULL)
        if r.returncode != want:
            bad.append(f"{why}: {' '.join(argv[1:])} exited "
                       f"{r.returncode}, not {want}: {r.stderr[:200]}")
        if want in (2, 3) and "--json" in argv and r.stdout:
            bad.append(f"{why}: stdout not empty: {r.stdout[:100]}")
        if want == 1 and "--json" in argv:
            json.loads(r.stdout)

for b in bad:
    print("mismatch:", b)
print(f"doc claims: {n_opts} options, {n_set} settings, {n_msg} quoted "
      f"messages and metric names, {len(cases)} exit codes checked; {len(bad)} mismatch(es)")
sys.exit(1 if bad else 0)

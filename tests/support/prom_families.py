#!/usr/bin/python3
"""prom_families.py - reads a Prometheus text exposition on stdin and
checks it with the reference parser, Debian's python3-prometheus-client
(prometheus_client.parser.text_string_to_metric_families): every sample
line belongs to a family that has a type and help text, no family comes
twice (the text format wants each family's lines as one group), counters
are not negative, summaries carry quantiles.  Prints "families F samples
S"; exits 1 with the problems, 77 when the parser is not installed."""
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("skipped: no prometheus_client (apt-get install "
          "python3-prometheus-client)")
    sys.exit(77)

text = sys.stdin.read()
lines = [l for l in text.splitlines() if l and not l.startswith("#")]
problems, seen, nsamples = [], set(), 0
for fam in text_string_to_metric_families(text):
    names = sorted({s.name for s in fam.samples})
    if fam.type not in ("counter", "gauge", "summary"):
        problems.append("%s: type %s (samples %s)" % (fam.name, fam.type,
                                                     names))
    if not fam.documentation:
        problems.append("%s: no help" % fam.name)
    if fam.name in seen:
        problems.append("%s: a second group of lines" % fam.name)
    seen.add(fam.name)
    for s in fam.samples:
        nsamples += 1
        if fam.type == "counter" and s.value < 0:
            problems.append("%s: negative counter %r" % (s.name, s.value))
    if fam.type == "summary" and fam.samples and not any(
            "quantile" in s.labels for s in fam.samples):
        problems.append("%s: a summary without quantiles" % fam.name)
if nsamples != len(lines):
    problems.append("%d sample lines, the parser read %d" % (len(lines),
                                                             nsamples))
print("families %d samples %d" % (len(seen), nsamples))
for p in problems:
    print(p)
sys.exit(1 if problems else 0)

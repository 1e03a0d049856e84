#!/usr/bin/env python3
"""onednn_profile.py - where a bench_train step's oneDNN time goes.

    ONEDNN_VERBOSE=1 bench_train --model M ... | scripts/onednn_profile.py [--top K]

Reads bench_train's output with oneDNN's verbose lines (oneDNN 2.x:
onednn_verbose,exec,cpu,<primitive>,<kernel>,<direction>,...,<shape>,<ms>)
and keeps those after bench_train's "bench_train: steps start" line (the
plan's creation and timed choices come before it).  Per primitive, kernel,
direction and shape: the calls per step and the median call's time, and
their product, ms per step (a median, so that a first call's one-off cost
does not count); the K largest (default 15), then oneDNN's total per step
against the step's time from bench_train's result line (samples/s and
the batch it names).  What is not oneDNN's (traind's own kernels, the
optimizer, the loss) is the difference.  Exit status: 0, 1 when the input
holds no step or no oneDNN line after the marker, 2 bad arguments.
"""
import re
import statistics
import sys
from collections import defaultdict


def main(argv):
    top = 15
    args = argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if len(args) == 2 and args[0] == "--top" and args[1].isdigit():
        top = int(args[1])
    elif args:
        print("usage: onednn_profile.py [--top K] < bench_train output",
              file=sys.stderr)
        return 2
    started = False
    calls = defaultdict(list)
    result = None
    for line in sys.stdin:
        line = line.rstrip("\n")
        if line.startswith("bench_train: steps start"):
            started = True
            calls.clear()
            continue
        m = re.search(r"batch (\d+) threads \d+: ([0-9.]+) samples/s.*"
                      r"\((\d+) steps after (\d+) warm-up\)", line)
        if m:
            result = tuple(float(x) for x in m.groups())
            continue
        if not started or not line.startswith("onednn_verbose,exec,"):
            continue
        f = line.split(",")
        try:
            ms = float(f[-1])
        except ValueError:
            continue
        calls[(f[3], f[4], f[5], f[-2])].append(ms)
    if result is None or not calls:
        print("onednn_profile: no bench_train result or no oneDNN call "
              "after \"bench_train: steps start\" (ONEDNN_VERBOSE=1?)",
              file=sys.stderr)
        return 1
    batch, sps, steps, warmup = result
    ran = steps + warmup
    rows = []
    for (prim, impl, prop, shape), t in calls.items():
        per = len(t) / ran
        rows.append((statistics.median(t) * per, per, statistics.median(t),
                     prim, impl, prop, shape))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    step_ms = 1000.0 * batch / sps if sps > 0 else float("nan")
    print(f"{'ms/step':>8} {'calls':>6} {'ms/call':>8}  primitive, kernel, "
          "direction, shape")
    for r in rows[:top]:
        print(f"{r[0]:8.2f} {r[1]:6.2f} {r[2]:8.3f}  {r[3]} {r[4]} {r[5]} "
              f"{r[6]}")
    if len(rows) > top:
        rest = sum(r[0] for r in rows[top:])
        print(f"{rest:8.2f}         (the other {len(rows) - top})")
    print(f"oneDNN primitives: {total:.1f} ms of a {step_ms:.1f} ms step "
          f"({100 * total / step_ms:.0f} %); the rest is traind's own "
          "kernels, the optimizer and the loss")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

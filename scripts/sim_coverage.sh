#!/bin/sh
# sim_coverage.sh - line coverage of the CUDA backend by the simulated
# device's suite (issue 14; docs/cuda.md#coverage-of-the-cuda-backend).
#
# Sets up BUILD_DIR (default build-simcov) as a debug build with gcov
# instrumentation and the simulated device when it is not configured yet,
# builds only the executables of the `sim` suite, clears every earlier
# counter (.gcda), runs the suite and then gcov on the CUDA backend's
# objects as the simulator build compiles them (its C files as they are,
# cuda_kernels.cu and cuda_device.cu through sim_kernels.cc and
# sim_device.cc).  Prints lines executed per file, the total over the C
# files and cuda_kernels.cu (what issue 14 measures) and the total with
# cuda_device.cu.  With --lines, also every line never executed, as
# file:line: source.
#
#   scripts/sim_coverage.sh [--lines] [--no-run] [BUILD_DIR]
#
# --no-run reports the counters as they are (after a run of your own).
# Exit status: 1 when a test of the suite failed (the figures are still
# printed: they are what ran), 2 on a usage or setup error.
# Needs gcov matching the compiler (gcc's own), meson, ninja, python3.
set -eu
lines=0 run=1
while [ $# -gt 0 ]; do
    case $1 in
    --lines) lines=1 ;;
    --no-run) run=0 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "sim_coverage.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
    shift
done
build=${1:-build-simcov}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$here" -Dcuda=disabled -Dgpu_sim=enabled \
        -Db_coverage=true -Dbuildtype=debug >/dev/null || exit 2
fi
build=$(cd "$build" && pwd)
objdir=$build/tests/gpu/sim/libtraind_cuda_sim.a.p
status=0
if [ "$run" = 1 ]; then
    # the sim suite's executables and what they depend on, nothing else
    targets=$(python3 -c '
import json, os, subprocess, sys
b = sys.argv[1]
q = lambda what: json.loads(subprocess.check_output(
    ["meson", "introspect", b, what]))
ids = {t["id"]: t["filename"] for t in q("--targets")}
for t in q("--tests"):
    if "sim" in [s.split(":")[-1] for s in t["suite"]]:
        paths = [t["cmd"][0]]
        for d in t.get("depends", []):
            paths += ids.get(d, [])
        for p in paths:
            if p.startswith(b + "/"):
                print(os.path.relpath(p, b))
' "$build" | sort -u)
    [ -n "$targets" ] || { echo "sim_coverage.sh: no sim suite in $build" \
                               "(-Dgpu_sim=enabled?)" >&2; exit 2; }
    # shellcheck disable=SC2086 # one target per word
    ninja -C "$build" $targets >/dev/null || exit 2
    find "$build" -name '*.gcda' -delete
    meson test -C "$build" --no-rebuild --suite sim || status=1
fi
[ -d "$objdir" ] || { echo "sim_coverage.sh: $objdir is missing" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/td-simcov-XXXXXX")
trap 'rm -rf "$work"' EXIT
# gcov writes its .gcov files into the current directory
(cd "$work" && gcov -p -o "$objdir" "$objdir"/*.gcda "$objdir"/.*.gcda \
     >/dev/null 2>"$work/gcov.err") || { cat "$work/gcov.err" >&2; exit 2; }
echo
echo "CUDA backend line coverage (gcov, $build, suite sim):"
for f in "$work"/*lib#backend#cuda#*.gcov; do
    awk -v lines="$lines" '
    function trim(s) { sub(/^[ \t]+/, "", s); return s }
    /^ *-: *0:Source:/ { src = $0; sub(/.*Source:/, "", src); next }
    {
        split($0, p, ":")
        c = trim(p[1]); n = trim(p[2])
        if (c == "-") next
        total++
        if (c ~ /^#####$/ || c ~ /^=====$/) {
            if (lines) {
                s = $0; sub(/^[^:]*:[^:]*:/, "", s)
                miss[++nm] = n ": " s
            }
        } else hit++
    }
    END {
        name = src; sub(/.*lib\/backend\/cuda\//, "", name)
        printf "%-16s %4d of %4d lines  %6.2f%%\n", name, hit, total,
               total ? 100 * hit / total : 0
        for (i = 1; i <= nm; i++)
            printf "    lib/backend/cuda/%s:%s\n", name, miss[i] > "/dev/stderr"
    }' "$f"
done 2>"$work/missed" | sort | tee "$work/table"
awk '{ h += $2; t += $4; if ($1 != "cuda_device.cu") { h2 += $2; t2 += $4 } }
     END { printf "total (C files + cuda_kernels.cu): %d of %d lines  %.2f%%\n",
                  h2, t2, t2 ? 100 * h2 / t2 : 0
           printf "total with cuda_device.cu:         %d of %d lines  %.2f%%\n",
                  h, t, t ? 100 * h / t : 0 }' "$work/table"
if [ "$lines" = 1 ]; then
    echo "lines never executed:"
    cat "$work/missed"
fi
exit "$status"

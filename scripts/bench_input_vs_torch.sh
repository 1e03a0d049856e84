#!/bin/sh
# bench_input_vs_torch.sh - traind's input pipeline against torchvision, per core.
#
# Alternates, RUNS times, pinned to one core (CPU, default 1):
#   traind: build/tests/bench/bench_input --workers 1 --runs 1 (rrc 224 +
#           flip, batch 64, on shards packed with --index INDEX, as
#           `trainctl pack` does by default)
#   torch:  scripts/bench_torch_input.py --runs 1 --normalize on the same
#           shards (PIL, torchvision.io, and PIL with ToTensor + Normalize)
# and prints each pair and the median, min and max of the ratios, of
# images per wall second and per CPU second (less disturbed by other work
# on a shared machine).
#   scripts/bench_input_vs_torch.sh [BUILD_DIR] [RUNS] [INDEX] [CPU]
set -eu
build=${1:-build} runs=${2:-5} index=${3:-2} cpu=${4:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/td-vs-torch-XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$build/tests/bench/bench_input" --keep "$dir" --index "$index" \
    --runs 1 --workers 1 --epochs 1 >/dev/null
: > "$dir/ratios"
i=0
while [ "$i" -lt "$runs" ]; do
    i=$((i + 1))
    out=$(taskset -c "$cpu" "$build/tests/bench/bench_input" --workers 1 \
             --runs 1 --epochs 2 --index "$index")
    td=$(printf '%s\n' "$out" | awk '/^pipeline, 1 worker/ {print $5}')
    tdc=$(printf '%s\n' "$out" | awk '/per CPU second/ {print $7}')
    tv=$(taskset -c "$cpu" /usr/bin/python3 "$here/scripts/bench_torch_input.py" \
             "$dir/shards" --runs 1 --epochs 2 --normalize --json)
    set -- $(printf '%s' "$tv" | /usr/bin/python3 -c 'import json,sys; j = json.load(sys.stdin); print(" ".join("%.1f" % j[k][m] for m in ("median", "cpu_median") for k in ("pil", "io", "pil_norm")))')
    echo "run $i: img/s traind $td, torchvision PIL $1, torchvision.io $2," \
         "PIL + ToTensor/Normalize $3; img/cpu-s $tdc, $4, $5, $6"
    echo "$td $1 $2 $3 $tdc $4 $5 $6" >> "$dir/ratios"
done
/usr/bin/python3 - "$dir/ratios" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
for unit, o in (("img/s", 0), ("img/cpu-s", 4)):
    for name, k in (("PIL", 1), ("torchvision.io", 2),
                    ("PIL + ToTensor/Normalize", 3)):
        r = [row[o] / row[o + k] for row in rows]
        print(f"traind / torchvision {name}, {unit}: median "
              f"{statistics.median(r):.2f}x (min {min(r):.2f}, "
              f"max {max(r):.2f}, {len(r)} runs)")
PY

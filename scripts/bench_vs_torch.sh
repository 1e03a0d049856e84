#!/bin/sh
# bench_vs_torch.sh - traind's input pipeline against torchvision, per core.
#
# Alternates, RUNS times, pinned to one core (CPU, default 1):
#   traind: build/tests/bench/bench_input --workers 1 --runs 1 (rrc 224 +
#           flip, batch 64, on shards packed with --restart RESTART)
#   torch:  scripts/bench_torch_input.py --runs 1 on the same shards
# and prints each pair and the median, min and max of the ratios.
#   scripts/bench_vs_torch.sh [BUILD_DIR] [RUNS] [RESTART] [CPU]
set -eu
build=${1:-build} runs=${2:-5} restart=${3:-4} cpu=${4:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/td-vs-torch-XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$build/tests/bench/bench_input" --keep "$dir" --restart "$restart" \
    --runs 1 --workers 1 --epochs 1 >/dev/null
: > "$dir/ratios"
i=0
while [ "$i" -lt "$runs" ]; do
    i=$((i + 1))
    td=$(taskset -c "$cpu" "$build/tests/bench/bench_input" --workers 1 \
             --runs 1 --epochs 2 --restart "$restart" |
         awk '/^pipeline, 1 worker/ {print $5}')
    tv=$(taskset -c "$cpu" /usr/bin/python3 "$here/scripts/bench_torch_input.py" \
             "$dir/shards" --runs 1 --epochs 2 --json)
    pil=$(printf '%s' "$tv" | /usr/bin/python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["pil"]["median"])')
    tio=$(printf '%s' "$tv" | /usr/bin/python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["io"]["median"])')
    echo "run $i: traind $td img/s, torchvision PIL $pil, torchvision.io $tio"
    echo "$td $pil $tio" >> "$dir/ratios"
done
/usr/bin/python3 - "$dir/ratios" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
for name, k in (("PIL", 1), ("torchvision.io", 2)):
    r = [row[0] / row[k] for row in rows]
    print(f"traind / torchvision {name}: median {statistics.median(r):.2f}x "
          f"(min {min(r):.2f}, max {max(r):.2f}, {len(r)} runs)")
PY

#!/bin/sh
# bench_packings.sh - the input pipeline on the same images packed several
# ways, alternated so that a noisy machine disturbs them alike.
#
# Packs bench_input's 384 photo-like JPEGs once per packing (bench_input
# --keep), then runs `trainctl bench-input` (random_resized_crop 224 +
# flip, batch 64, 1 worker, 3 epochs) pinned to CPU, ROUNDS times over all
# of them in turn, and prints each packing's median, min and max images/s.
#   scripts/bench_packings.sh [BUILD_DIR] [ROUNDS] [CPU] [PACKING...]
# PACKING: index:N, restart:N or copy (default: restart:4 index:2 index:1
# copy).
set -eu
build=${1:-build} rounds=${2:-6} cpu=${3:-1}
[ $# -ge 3 ] && shift 3 || shift $#
[ $# -gt 0 ] || set -- restart:4 index:2 index:1 copy
dir=$(mktemp -d "${TMPDIR:-/tmp}/td-packings-XXXXXX")
trap 'rm -rf "$dir"' EXIT
for p in "$@"; do
    case $p in
    index:*) opt="--index ${p#index:}" ;;
    restart:*) opt="--restart ${p#restart:}" ;;
    copy) opt="--index 0" ;;
    *) echo "bench_packings: unknown packing $p" >&2; exit 2 ;;
    esac
    "$build/tests/bench/bench_input" --keep "$dir/$p" $opt --runs 1 \
        --epochs 1 --workers 1 | head -1 | sed "s/^bench_input:/$p:/"
done
i=0
while [ "$i" -lt "$rounds" ]; do
    i=$((i + 1))
    for p in "$@"; do
        v=$(taskset -c "$cpu" "$build/client/trainctl" bench-input \
                --data "$dir/$p/shards" --size 224 \
                --augment random_resized_crop,flip --workers 1 --batch 64 \
                --epochs 3 --json |
            /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["images_per_s"])')
        echo "$p $v"
    done
done | /usr/bin/python3 -c '
import collections, statistics, sys
d = collections.OrderedDict()
for line in sys.stdin:
    k, v = line.split()
    d.setdefault(k, []).append(float(v))
for k, v in d.items():
    print("%-10s median %.0f img/s (min %.0f, max %.0f, %d runs)"
          % (k, statistics.median(v), min(v), max(v), len(v)))
'

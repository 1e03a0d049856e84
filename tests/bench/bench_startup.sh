#!/bin/sh
# bench_startup.sh - how long traind takes to start with many ended jobs,
# with and without state_dir/job-rows.cache (docs/daemon.md, "State on
# disk").  Prints figures; never fails on speed.
#
#   tests/bench/bench_startup.sh TRAIND TRAINCTL [N]
#
# Runs one job with a big record (30 epochs, a window every step: ~207 KB),
# copies its record to N job ids (default 1000; the docs' 4,000 take
# ~800 MB), then starts traind three times without the cache and three
# times with it, alternating, timing exec until `trainctl queue` answers.
set -eu
traind=$1 trainctl=$2 n=${3:-1000}
src=${TD_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
dir=$(mktemp -d /tmp/traind-bench-startup-XXXXXX)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
pid=0
sock=$dir/s.sock
export TD_MODELS_DIR="$src/config/models"

start() {
    "$traind" --foreground --config /dev/null --socket "$sock" \
        --state-dir "$dir/state" 2>"$dir/log" &
    pid=$!
    until "$trainctl" --socket "$sock" queue >/dev/null 2>&1; do
        kill -0 $pid || { cat "$dir/log"; exit 1; }
        sleep 0.02
    done
}
stop() { kill $pid; wait $pid || true; }

cat >"$dir/spec.json" <<'SPEC'
{"name": "curvy", "data": {"classes": 4},
 "input": {"size": [8, 8], "channels": 1, "source": "synthetic",
           "normalize": {"mean": [0.5], "std": [0.25]}},
 "model": {"layers": [
   {"type": "conv2d", "name": "c1", "channels": 4, "kernel": 3, "pad": 1},
   {"type": "relu", "name": "r1"}, {"type": "flatten", "name": "f"},
   {"type": "dense", "name": "fc", "units": "classes"}]},
 "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9},
 "batch_size": 8, "epochs": 30, "seed": 1, "threads": 1,
 "metrics": {"warmup_steps": 1, "window_steps": 1},
 "checkpoint": {"every_steps": 0, "keep": 1}}
SPEC
start
"$trainctl" --socket "$sock" submit "$dir/spec.json" >/dev/null
until "$trainctl" --socket "$sock" --json show 1 | grep -q '"state": *"completed"'; do
    sleep 0.2
done
stop
rec=$dir/state/jobs/1.json
echo "record: $(wc -c <"$rec") bytes; making $n copies"
i=2
while [ $i -le $n ]; do
    sed "s/^ \"id\": 1,\$/ \"id\": $i,/" "$rec" >"$dir/state/jobs/$i.json"
    i=$((i + 1))
done
grep -q '^ "id": 2,$' "$dir/state/jobs/2.json" || { echo "copy failed"; exit 1; }

for round in 1 2 3; do
    for mode in without with; do
        [ $mode = without ] && rm -f "$dir/state/job-rows.cache"
        t0=$(date +%s%N)
        start
        t1=$(date +%s%N)
        stop
        echo "$mode cache: ready in $(( (t1 - t0) / 1000000 )) ms;" \
            "$(grep -o 'restored.*' "$dir/log")"
    done
done

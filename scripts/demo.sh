#!/usr/bin/env bash
# demo.sh - the README's main job, end to end on the CPU:
#
#   1. install what is needed and build traind (release)
#   2. pack Fashion-MNIST (Debian's dataset-fashion-mnist) into tar shards,
#      once, under $TD_DEMO_DATA (default /var/tmp/traind-demo/data)
#   3. start traind in the foreground on a temporary socket and state dir
#   4. submit the reference job (config/jobs/fmnist-cnn.json) for
#      $EPOCHS epochs (default 2) and follow it live with trainctl
#   5. print the final accuracy, samples/s and the verdict; stop traind
#
# About a minute of training on 2 cores.  EPOCHS=3 measured 0.9105 top-1.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TD_BUILD:-$root/build-release}
data=${TD_DEMO_DATA:-/var/tmp/traind-demo/data}
epochs=${EPOCHS:-2}

"$root/scripts/deps.sh"
[[ -d /usr/local/cuda/bin ]] && export PATH="/usr/local/cuda/bin:$PATH"
if [[ ! -f "$build/build.ninja" ]]; then
  meson setup "$build" "$root" -Dbuildtype=release >/dev/null
fi
echo "demo: building traind in $build"
ninja -C "$build" daemon/traind client/trainctl >/dev/null
traind=$build/daemon/traind
trainctl=$build/client/trainctl

# pack stores IDX pixels losslessly (PNG) by default: every pixel exact.
if [[ ! -f "$data/test/.packed-png" ]]; then
  echo "demo: packing Fashion-MNIST into shards under $data"
  rm -rf "$data"
  mkdir -p "$data"
  "$trainctl" pack --idx-dir /usr/share/datasets/fashion-mnist -o "$data"
  touch "$data/test/.packed-png"
fi

run=$(mktemp -d /tmp/traind-demo-XXXXXX)
sock=$run/traind.sock
cleanup() {
  if [[ -n "${pid:-}" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    wait "$pid" || true
  fi
  rm -rf "$run"
}
trap cleanup EXIT
export TRAIND_SOCKET=$sock TD_MODELS_DIR=$root/config/models
"$traind" --foreground --config /dev/null --socket "$sock" \
  --state-dir "$run/state" --log-level warn &
pid=$!
for _ in $(seq 100); do
  [[ -S $sock ]] && break
  sleep 0.1
done
"$trainctl" version

plural=s
[[ $epochs == 1 ]] && plural=
echo "demo: training the reference job (fmnist-cnn, $epochs epoch$plural) on the CPU"
"$trainctl" submit "$root/config/jobs/fmnist-cnn.json" \
  --set "data.train=$data/train" --set "data.val=$data/test" \
  --set "epochs=$epochs" --follow
"$trainctl" show 1 --json | python3 -c '
import json, sys
job = json.load(sys.stdin)["job"]
r = job.get("result", {})
w = job.get("last_window") or {}
n = r.get("epochs", 0)
print("demo: result: val_acc %.4f after %d epoch%s, %.0f samples/s, verdict %s"
      % (r.get("val_acc") or 0, n, "" if n == 1 else "s",
         r.get("samples_per_s") or 0, r.get("verdict")))
if w.get("advice"):
    print("demo: advice:", w["advice"])
'

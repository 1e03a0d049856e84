#!/usr/bin/env bash
# demo.sh - the README's main job.
#
# Installs what is needed, builds traind, and runs the most complete thing
# traind can do today.  It grows into the full demo (start traind, train
# the reference Fashion-MNIST job on the CPU with live metrics, print the
# result) as the pipeline, compute and daemon issues land.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TD_BUILD:-$root/build}
"$root/scripts/deps.sh"
[[ -d /usr/local/cuda/bin ]] && export PATH="/usr/local/cuda/bin:$PATH"
if [[ ! -f "$build/build.ninja" ]]; then
  meson setup "$build" "$root" -Dbuildtype=release >/dev/null
fi
echo "demo: building traind in $build"
ninja -C "$build" >/dev/null

"$build/daemon/traind" --version
echo "demo: benchmarks of the shared pieces"
"$build/tests/bench/bench_rng"
"$build/tests/bench/bench_queue"

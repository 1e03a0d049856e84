#!/usr/bin/env bash
# run_smoke.sh - one fuzz target for a short, bounded time (meson test
# --suite fuzz).  Replays the target's seed corpus and regression inputs,
# then mutates for TD_FUZZ_SMOKE_SECONDS (default 10).  New inputs and any
# crash go to the scratch dir, never into the source tree.  libFuzzer
# exits non-zero on a crash, a sanitizer report, a leak, a timeout of one
# input or the memory limit, and so does this script.
#   run_smoke.sh <fuzz_exe> <tests/fuzz dir> <target> <scratch dir>
set -euo pipefail
exe=$1 src=$2 target=$3 scratch=$4
secs=${TD_FUZZ_SMOKE_SECONDS:-10}
rm -rf "$scratch"
mkdir -p "$scratch/corpus"
dirs=("$scratch/corpus")
for d in "$src/corpus/$target" "$src/regress/$target"; do
  [[ -d $d ]] && dirs+=("$d")
done
exec "$exe" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
  -error_exitcode=1 -timeout_exitcode=1 \
  -artifact_prefix="$scratch/" -print_final_stats=1 "${dirs[@]}"

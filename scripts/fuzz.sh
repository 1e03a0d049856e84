#!/usr/bin/env bash
# fuzz.sh - runs every libFuzzer target (tests/fuzz) for a long time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS per target (default 600; with TD_FUZZ_RUNS=N a target also stops
# after N executions, whichever comes first); TARGETs default to all of them
# (protocol spec settings safetensors tar tdidx jpeg idx classes png weights
# pack dispatch).  Builds the clang ASan+UBSan fuzz tree under
# $TD_BUILD_BASE/fuzz (default build-test/fuzz, shared with scripts/test.sh),
# then runs the targets one after the other ($TD_FUZZ_JOBS at a time,
# default 1).  Each target's growing corpus lives in $TD_FUZZ_WORK/<target>
# (default $TD_BUILD_BASE/fuzz-work), never in the source tree; the
# committed seeds (tests/fuzz/corpus) and regression inputs
# (tests/fuzz/regress) are read, not written.  Prints one line per target with the executions and exec/s
# libFuzzer reports, and copies any crashing, leaking or hanging input to
# tests/fuzz/regress/<target>/ (the smoke run in `meson test --suite fuzz`
# then replays it).  Exits non-zero if any target found something.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base=${TD_BUILD_BASE:-$root/build-test}
build=$base/fuzz
work=${TD_FUZZ_WORK:-$base/fuzz-work}
jobs=${TD_FUZZ_JOBS:-1}
secs=${1:-600}
shift || true
all=(protocol spec settings safetensors tar tdidx jpeg idx classes png weights
     pack dispatch)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")
[[ $secs =~ ^[0-9]+$ ]] || { echo "fuzz: SECONDS must be a number" >&2; exit 2; }
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] ||
    { echo "fuzz: unknown target '$t' (known: ${all[*]})" >&2; exit 2; }
done

"$root/scripts/deps.sh"
opts=(-Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false
      -Dbuildtype=debugoptimized -Dfuzz=enabled)
if [[ -f $build/build.ninja ]]; then
  meson configure "$build" "${opts[@]}" >/dev/null
else
  CC=clang meson setup "$build" "$root" "${opts[@]}" >/dev/null
fi
ninja -C "$build" fuzz >/dev/null

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

one() { # target: fuzzes it, writes $work/<target>/result
  local t=$1 dir=$work/$1
  mkdir -p "$dir/corpus" "$dir/artifacts"
  rm -f "$dir/artifacts/"* "$dir/result"
  local dirs=("$dir/corpus")
  for d in "$root/tests/fuzz/corpus/$t" "$root/tests/fuzz/regress/$t"; do
    [[ -d $d ]] && dirs+=("$d")
  done
  local rc=0 runs=()
  [[ -n ${TD_FUZZ_RUNS:-} ]] && runs=(-runs="$TD_FUZZ_RUNS")
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" "${runs[@]}" \
    -rss_limit_mb=2048 \
    -timeout=30 -error_exitcode=1 -timeout_exitcode=1 \
    -artifact_prefix="$dir/artifacts/" -print_final_stats=1 \
    "${dirs[@]}" >"$dir/log" 2>&1 || rc=$?
  local execs rate found=0
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  for f in "$dir/artifacts/"*; do
    [[ -e $f ]] || continue
    mkdir -p "$root/tests/fuzz/regress/$t"
    cp "$f" "$root/tests/fuzz/regress/$t/"
    found=$((found + 1))
  done
  printf '%-12s %12s executions %8s exec/s  corpus %5s  exit %d  findings %d\n' \
    "$t" "${execs:-?}" "${rate:-?}" \
    "$(find "$dir/corpus" -type f | wc -l)" "$rc" "$found" >"$dir/result"
  if ((found)); then
    echo "  $t: see $dir/log; input(s) copied to tests/fuzz/regress/$t/" \
      >>"$dir/result"
  fi
}

echo "fuzz: ${#targets[@]} target(s), ${secs} s each, $jobs at a time; logs in $work/<target>/log"
running=0
for t in "${targets[@]}"; do
  one "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

status=0
for t in "${targets[@]}"; do
  cat "$work/$t/result"
  grep -q 'findings 0$' "$work/$t/result" &&
    grep -q ' exit 0 ' "$work/$t/result" || status=1
done
exit $status

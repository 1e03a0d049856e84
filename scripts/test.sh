#!/usr/bin/env bash
# test.sh - the whole test suite, as the README's Quick start runs it.
#
#   1. install what is needed (scripts/deps.sh)
#   2. plain build, CUDA backend if nvcc and cuDNN are found, warnings as
#      errors: every suite (GPU-only tests skip without a device); then
#      every suite again on the plan AMD Zen 4/5 CPUs take, whatever this
#      CPU is (oneDNN limited to avx512_core_bf16, `precision: auto`
#      choosing bf16), so that an Intel machine's CI catches what would
#      fail on an AMD one; and on a CPU with AVX-512, once more held to
#      AVX2 (ONEDNN_MAX_CPU_ISA), the kernels of an AMD EPYC Zen 3 (fp32,
#      no bf16)
#   3. ASan+UBSan build without CUDA: every suite, with the CUDA backend
#      built against the simulated device (tests/gpu/sim) and its suites
#   4. ThreadSanitizer build without CUDA: the threaded suites, the
#      simulated device's among them
#   5. clang ASan+UBSan build of the libFuzzer targets (tests/fuzz): each
#      target over its seeds and regression inputs, then 10 s of fuzzing
#      (`--suite fuzz`; scripts/fuzz.sh runs them long)
#
# Build trees go under $TD_BUILD_BASE (default: build-test/ in the tree) and
# are reused between runs.  Ends with one line "tests: N passed, N failed,
# N skipped" over all runs, and exits non-zero if anything failed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base=${TD_BUILD_BASE:-$root/build-test}
"$root/scripts/deps.sh"
[[ -d /usr/local/cuda/bin ]] && export PATH="/usr/local/cuda/bin:$PATH"

passed=0 failed=0 skipped=0
status=0
failures="" # Check's failure lines, repeated at the end where CI logs show them

setup() { # dir, options...
  local dir=$1; shift
  if [[ -f "$dir/build.ninja" ]]; then
    meson configure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$root" "$@" >/dev/null
  fi
}

count() { # dir: adds the results of its last `meson test` to the totals
  local log=$1/meson-logs/testlog.json
  [[ -f $log ]] || return 0
  local p f s
  p=$(grep -c '"result": "OK"' "$log" || true)
  s=$(grep -c '"result": "SKIP"' "$log" || true)
  f=$(grep -Ec '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log" || true)
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
}

run() { # name, dir, ninja target ("": all), "test options", meson options...
  local name=$1 dir=$2 target=$3 topts=$4; shift 4
  echo "== $name"
  local t0=$SECONDS
  setup "$dir" "$@"
  rm -f "$dir/meson-logs/testlog.json"
  # With a target, build just that and let meson test not rebuild the rest.
  if [[ -n $target ]]; then
    if ! ninja -C "$dir" "$target" >"$dir/meson-logs/ninja-$target.log" 2>&1
    then
      tail -30 "$dir/meson-logs/ninja-$target.log"
      status=1 failed=$((failed + 1))
      echo "== $name: build failed, $((SECONDS - t0)) s"
      return
    fi
    topts+=" --no-rebuild"
  fi
  # shellcheck disable=SC2086
  local bad=0
  if ! meson test -C "$dir" --print-errorlogs $topts; then
    status=1 bad=1
    # A build that failed leaves no test log: count it as one failure.
    [[ -f "$dir/meson-logs/testlog.json" ]] || failed=$((failed + 1))
  fi
  count "$dir"
  if [[ $bad -ne 0 && -f "$dir/meson-logs/testlog.txt" ]]; then
    # Check's own errors (e.g. "../../src/check_pack.c:NN: Error in call
    # to fwrite: No space left on device", its exit 2 that the test log
    # calls an early exit) name the cause; so may the disk's free space.
    failures+=$(grep -E '^[^ ]+\.c:[0-9]+:[EF]:|^[^ ]*check[_a-z]*\.c:[0-9]+: ' \
      "$dir/meson-logs/testlog.txt" |
      sed "s|^|  [$name] |" | head -20 || true)
    failures+=$'\n'"  [$name] free space: "
    failures+=$(df -h --output=avail,target "$dir" /tmp 2>/dev/null |
      tail -n +2 | tr -s ' \n' ' ' || true)
    failures+=$'\n'
  fi
  echo "== $name: $((SECONDS - t0)) s"
}

run "plain build (CUDA auto, -Werror)" "$base/plain" "" "" \
  -Dwerror=true -Dcuda=auto -Dbuildtype=debugoptimized
# The AMD plan: oneDNN's AVX512_BF16 kernels in the blocked nChw16c
# layout (on an AMX CPU too) and a bf16 dot-product rate above auto's
# threshold (docs/compute.md, precision auto), as Zen 4/5 report.  On a CPU
# without AVX512_BF16 this is the plain run again.
ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 TD_CPU_DOT_RATE=2 \
  run "plain build, the AMD plan (avx512_core_bf16)" "$base/plain" "" "" \
  -Dwerror=true -Dcuda=auto -Dbuildtype=debugoptimized
# AVX2 only (AMD EPYC Zen 3): fp32, other kernels and layouts (nChw8c),
# bf16 refused.  On a CPU without AVX-512 the plain run was this one.
if grep -qw avx512f /proc/cpuinfo; then
  ONEDNN_MAX_CPU_ISA=AVX2 \
    run "plain build, the AVX2 plan (AMD Zen 3)" "$base/plain" "" "" \
    -Dwerror=true -Dcuda=auto -Dbuildtype=debugoptimized
fi
# The sanitizer builds also build the CUDA backend against the simulated
# device (tests/gpu/sim): it needs CUDA's and cuDNN's headers, not a GPU;
# where they are installed it must build and run.
sim=auto
[[ -f /usr/local/cuda/include/cudnn.h ]] && sim=enabled
# The sanitizer builds run 3-10x slower, and this machine is shared: their
# tests get twice the time (Check's per-test timeouts and meson's).
CK_TIMEOUT_MULTIPLIER=2 run "ASan+UBSan build" "$base/asan" "" "-t 2" \
  -Dwerror=true -Dcuda=disabled -Dgpu_sim=$sim \
  -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
# libgomp is not built with ThreadSanitizer, so TSan cannot see the
# barriers that end an OpenMP parallel region and reports the CPU backend's
# parallel loops as races: one OpenMP thread under TSan (the threads the
# suites are about - pipeline workers, writer, loop, trainer - are ours).
OMP_NUM_THREADS=1 CK_TIMEOUT_MULTIPLIER=2 \
  run "ThreadSanitizer build (threaded suites)" "$base/tsan" "" \
  "--suite threaded -t 2" \
  -Dwerror=true -Dcuda=disabled -Dgpu_sim=$sim -Db_sanitize=thread \
  -Db_lundef=false -Dbuildtype=debugoptimized
# clang: the libFuzzer targets and the library they instrument, nothing
# else (warnings are not errors here: -Werror is the gcc builds' job).
CC=clang run "fuzz targets, clang ASan+UBSan (--suite fuzz)" "$base/fuzz" \
  fuzz "--suite fuzz" \
  -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false \
  -Dbuildtype=debugoptimized -Dfuzz=enabled

if [[ -n ${failures//$'\n'/} ]]; then
  echo "failed checks:"
  printf '%s' "$failures" | grep -v '^$' || true
fi
echo "tests: $passed passed, $failed failed, $skipped skipped"
if ((failed > 0)); then status=1; fi
exit $status

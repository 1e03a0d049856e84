#!/usr/bin/env bash
# test_walkthrough.sh - docs/models.md as a user runs it: every ```sh block
# of the page, in order, verbatim, in a scratch folder that has the
# build (as build/), config/ and README.md; fails on the first command
# that fails.  Then checks what the page says the output shows: OpenCV
# agrees with traind on at least 47 of the 50 images, and init
# re-initialised exactly the
# new classifier.  Skips (77) without python3-opencv.
set -euo pipefail
src=${TD_SOURCE_ROOT:?}
bld=${TD_BUILD_ROOT:?}
if ! /usr/bin/python3 -c 'import cv2, numpy' 2>/dev/null; then
  echo "SKIP: /usr/bin/python3 cannot import cv2 (apt-get install python3-opencv)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/td-walk-XXXXXX")
trap 'rm -rf "$work"' EXIT
ln -s "$bld" "$work/build"
ln -s "$src/config" "$work/config"
cp "$src/README.md" "$work/README.md"
awk '/^```sh$/ {on = 1; next} /^```$/ {on = 0} on' "$src/docs/models.md" \
  > "$work/walk.sh"
cd "$work"
export PATH=/usr/bin:$PATH  # Debian's python3, whatever else is first
bash -euo pipefail walk.sh 2>&1 | tee walk.out
# OpenCV decodes and resizes with its own code, so an image near a tie may
# go the other way; a wrong export agrees on about 10 of 50 (5 classes)
agree=$(sed -n 's/^OpenCV and traind agree on \([0-9]*\) of 50 images$/\1/p' walk.out)
test -n "$agree" && test "$agree" -ge 47
grep -q 're-initialised (shape differs: linear.weight, linear.bias)' walk.out
grep -q '^done  4 epochs, 40 steps' walk.out
# On a daemon: every epoch in the history, the curves drawn as a PNG of
# the default 1200x900.
test "$(wc -l < walk/curves.csv)" -eq 5
# The model exported, then the job's files off the daemon's disk.
test -s walk/daemon-model.safetensors
grep -q '^job 1: removed ([0-9.]* [kMG]B freed)$' walk.out
test ! -e walk/state/checkpoints/1 && test ! -e walk/state/jobs/1.json
python3 - <<'PY'
import struct
with open("walk/curves.png", "rb") as f:
    head = f.read(24)
assert head[:8] == b"\x89PNG\r\n\x1a\n", head
assert struct.unpack(">II", head[16:24]) == (1200, 900), head
PY
echo "walkthrough: ok"

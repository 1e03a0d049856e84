#!/bin/sh
# test_cli_plan.sh TRAINCTL - `trainctl plan` as documented: a zoo model's
# bill in --json (parts add up to the total, the plan is below the fp32
# per-layer layout), the text table, and usage errors with exit 2.
set -eu
tc=$1
export TD_MODELS_DIR="$TD_SOURCE_ROOT/config/models"
"$tc" plan resnet20 --input 3x32x32 --classes 10 --batch 64 --json |
python3 -c '
import json, sys
o = json.load(sys.stdin)
p, f = o["plan"], o["fp32_per_layer"]
parts = sum(v for k, v in p.items() if k != "total")
assert parts == p["total"], (parts, p["total"])
assert p["total"] < f["total"], (p, f)
assert p["weights_low_precision"] > 0 and f["weights_low_precision"] == 0
assert o["precision"] == "bf16" and o["batch"] == 64
print("plan json ok:", p["total"], "<", f["total"])
'
"$tc" plan resnet50 --batch 256 | grep -q "a 80 GB card: fits"
set +e
"$tc" plan resnet20 --precision fp8 2>/dev/null; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: bad --precision gave exit $rc, not 2"; exit 1; }
"$tc" plan no-such-model 2>/dev/null; rc=$?
[ $rc -eq 1 ] || { echo "FAIL: unknown model gave exit $rc, not 1"; exit 1; }
# --json: the failure is JSON on stdout too (it was on stderr alone)
out=$("$tc" plan no-such-model --json 2>/dev/null); rc=$?
[ $rc -eq 1 ] || { echo "FAIL: unknown model --json gave exit $rc"; exit 1; }
printf '%s' "$out" | python3 -c '
import json, sys
e = json.load(sys.stdin)["error"]
assert e["class"] == "failed" and "no-such-model" in e["desc"], e
' || { echo "FAIL: plan --json error is not JSON: $out"; exit 1; }
echo OK

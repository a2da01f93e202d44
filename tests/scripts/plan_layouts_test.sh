#!/usr/bin/env bash
# scripts/plan-layouts.sh on 4 ranks of a small tpx-train model (4 blocks, batch 16), priced on a
# made-up device. The layouts of 4 ranks, worked out here: meshes 1x4, 2x2 and 4x1; 2 stages of
# 1x2 or 2x1 in each of the 4 default schedules; 4 stages of 1x1 in 1F1B and zero-bubble, while
# interleaved and zero-bubble V would cut the 4 blocks into 8 pieces, which tpx-train refuses, so
# those two are skipped with its reason: 13 reports priced, 2 skipped, each priced report kept
# under --out and a row of tpx-plan's --json, and the recommendation one of them; --plot draws
# them (plot-plan.sh, which refuses a file that is not tpx-plan's). The dry runs run side by side
# (--jobs, the cores by default); one at a time they price the same rows. A bad N or --jobs is
# refused with a usage line.
#   bash tests/scripts/plan_layouts_test.sh SOURCE_DIR TPX_TRAIN TPX_PLAN
set -uo pipefail
root=$1 train=$2 plan=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
contains() { [[ $output == *"$1"* ]]; }

output=$(bash "$root/scripts/plan-layouts.sh" --program "$train" --plan "$plan" --out reports \
  --plot layouts.png 4 --flops 1e12 --link-bw 1e9 --memory 1e12 --json plan.json -- --layers 4 \
  --d-model 16 --ffn 32 --batch 16 2>&1)
status=$?
echo "$output"
check "the sweep succeeds" test "$status" -eq 0
check "13 layouts priced, 2 skipped" contains "plan-layouts: 13 layouts priced, 2 skipped"
for skipped in 1x1-p4-interleaved 1x1-p4-zero-bubble-v; do
  check "$skipped is skipped with tpx-train's reason" \
    contains "plan-layouts: skipped $skipped: tpx-train: 4 layers do not cut into 8 pipeline pieces"
done
expected=(1x4 2x2 4x1 1x2-p2-1f1b 1x2-p2-zero-bubble 1x2-p2-interleaved 1x2-p2-zero-bubble-v
          2x1-p2-1f1b 2x1-p2-zero-bubble 2x1-p2-interleaved 2x1-p2-zero-bubble-v 1x1-p4-1f1b
          1x1-p4-zero-bubble)
for stem in "${expected[@]}"; do
  check "$stem.json is kept" test -s "reports/$stem.json"
done
check "tpx-plan prices the 13 reports, recommending one of them" python3 - plan.json "${expected[@]}" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
reports = [row["report"] for row in plan["rows"]]
expected = [stem + ".json" for stem in sys.argv[2:]]
sys.exit(0 if reports == expected and plan["recommendation"] in reports else 1)
PY
check "--plot draws the priced layouts into a PNG" python3 - layouts.png <<'PY'
import sys
sys.exit(0 if open(sys.argv[1], "rb").read(8) == b"\x89PNG\r\n\x1a\n" else 1)
PY
output=$(bash "$root/scripts/plot-plan.sh" reports/1x4.json not-drawn.png 2>&1)
status=$?
check "plot-plan.sh refuses a file that is not tpx-plan's --json" test "$status" -ne 0
check "the refusal names the file" contains "plot-plan: reports/1x4.json is not tpx-plan's --json"
output=$(bash "$root/scripts/plan-layouts.sh" --program "$train" --plan "$plan" --jobs 1 4 \
  --flops 1e12 --link-bw 1e9 --memory 1e12 --json one-at-a-time.json -- --layers 4 --d-model 16 \
  --ffn 32 --batch 16 2>&1)
status=$?
check "the sweep one dry run at a time (--jobs 1) succeeds" test "$status" -eq 0
check "it prices the same rows as the dry runs side by side" python3 - plan.json one-at-a-time.json <<'PY'
import json, sys
side_by_side, one_at_a_time = (json.load(open(f)) for f in sys.argv[1:])
sys.exit(0 if side_by_side["rows"] == one_at_a_time["rows"] else 1)
PY
output=$(bash "$root/scripts/plan-layouts.sh" --program "$train" --plan "$plan" --jobs 0 4 2>&1)
status=$?
check "--jobs 0 is refused" test "$status" -eq 2
check "the refusal says what --jobs must be" contains "plan-layouts: --jobs must be a whole number > 0"
output=$(bash "$root/scripts/plan-layouts.sh" --program "$train" --plan "$plan" 0 -- --layers 4 2>&1)
status=$?
check "N = 0 is refused" test "$status" -eq 2
check "the refusal says what N must be" contains "plan-layouts: N must be a whole number > 0, got '0'"
((failures == 0)) || { echo "$failures check(s) failed"; exit 1; }

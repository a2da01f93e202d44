#!/usr/bin/env bash
# scripts/plan-layouts.sh on 4 ranks of a small tpx-train model (4 blocks, batch 16), priced on a
# made-up device. The layouts of 4 ranks, worked out here: meshes 1x4, 2x2 and 4x1; 2 stages of
# 1x2 or 2x1 in each of the 4 default schedules; 4 stages of 1x1 in 1F1B and zero-bubble, while
# interleaved and zero-bubble V would cut the 4 blocks into 8 pieces, which tpx-train refuses, so
# those two are skipped with its reason: 13 reports priced, 2 skipped, each priced report kept
# under --out and a row of tpx-plan's --json, and the recommendation one of them; --plot draws
# them (plot-plan.sh, which refuses a file that is not tpx-plan's). The dry runs run side by side
# (--jobs, the cores by default); one at a time they price the same rows. With --memory-savers
# (batch 64, so that activations weigh) each layout comes also with activation checkpointing
# (-ckpt), and the 2x1 pipelines, whose X has 2 ranks, with per-pass FSDP (-perpass and
# -ckpt-perpass): 34 priced, 4 skipped; given a memory between the least a saver needs and the
# least a plain layout needs (read from that sweep's rows), only savers fit, and the
# recommendation is the one of them with the shortest step, while without --memory-savers none
# fits and the sweep points to the option; a saver the model flags already choose is not added
# again. Every layout overlaps (--overlap on): the meshes' FSDP collectives, the pipelines' passes
# between stages. For tpx-gpt the
# layouts are the meshes 1x4, 2x2, 4x1 and, with replicas, 2x1x2, 2x2x1 and 4x1x1, each whose X
# has more than one rank followed by its context-parallel one (-cp, its report saying so;
# load-balanced with --fused-attention): 9 priced, 6 when the model flags choose
# --context-parallel themselves; all with FSDP's collectives in the background, which tpx-plan
# prices as hidden, unless the model flags say --overlap off. A bad N or --jobs is refused with a
# usage line.
#   bash tests/scripts/plan_layouts_test.sh SOURCE_DIR TPX_TRAIN TPX_PLAN TPX_GPT
set -uo pipefail
root=$1 train=$2 plan=$3 gpt=$4
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
not_contains() { ! contains "$1"; }

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
check "with --overlap on: the meshes gather and reduce-scatter in the background, the pipelines pass" \
  python3 - reports <<'PY'
import json, sys
said = lambda stem, text: text in json.load(open(f"{sys.argv[1]}/{stem}.json"))["description"]
sys.exit(0 if said("2x2", "FSDP collectives in the background") and
         said("2x1-p2-1f1b", "passes and FSDP collectives in the background") and
         said("1x1-p4-zero-bubble", "passes and FSDP collectives in the background") else 1)
PY
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
savers_sweep() {  # savers_sweep JSON MEMORY [MODEL FLAGS...]
  local json=$1 memory=$2
  shift 2
  output=$(bash "$root/scripts/plan-layouts.sh" --program "$train" --plan "$plan" --memory-savers \
    --out savers 4 --flops 1e12 --link-bw 1e9 --memory "$memory" --json "$json" -- --layers 4 \
    --d-model 16 --ffn 32 --batch 64 "$@" 2>&1)
}
savers_sweep savers.json 1e12
status=$?
check "the sweep with --memory-savers succeeds" test "$status" -eq 0
check "34 layouts priced, 4 skipped" contains "plan-layouts: 34 layouts priced, 4 skipped"
with_savers=()
for stem in "${expected[@]}"; do
  with_savers+=("$stem" "$stem-ckpt")
  [[ $stem == 2x1-p2-* ]] && with_savers+=("$stem-perpass" "$stem-ckpt-perpass")
done
priced_in_order() {  # priced_in_order JSON STEM...: tpx-plan's rows are exactly STEM.json, in order
  python3 - "$@" <<'PY'
import json, sys
reports = [row["report"] for row in json.load(open(sys.argv[1]))["rows"]]
sys.exit(0 if reports == [stem + ".json" for stem in sys.argv[2:]] else 1)
PY
}
check "each layout is followed by its savers, per-pass FSDP only where X has 2 ranks" \
  priced_in_order savers.json "${with_savers[@]}"
memory=$(python3 - savers.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
saver = lambda r: "-ckpt" in r["report"] or "-perpass" in r["report"]
least_plain = min(r["peak_bytes"] for r in rows if not saver(r))
least_saver = min(r["peak_bytes"] for r in rows if saver(r))
print(int((least_plain + least_saver) / 2) if least_saver < least_plain else 0)
PY
)
check "some saver needs less memory than every plain layout" test "$memory" -gt 0
savers_sweep tight.json "$memory"
check "with $memory bytes only savers fit, and the fastest of them is recommended" \
  python3 - tight.json "$memory" <<'PY'
import json, sys
plan, memory = json.load(open(sys.argv[1])), float(sys.argv[2])
saver = lambda r: "-ckpt" in r["report"] or "-perpass" in r["report"]
fitting = [r for r in plan["rows"] if r["peak_bytes"] <= memory]
ok = all(r["fits"] == (r["peak_bytes"] <= memory) for r in plan["rows"])
ok = ok and fitting and all(saver(r) for r in fitting)
ok = ok and plan["recommendation"] == min(fitting, key=lambda r: r["step_ms"])["report"]
sys.exit(0 if ok else 1)
PY
output=$(bash "$root/scripts/plan-layouts.sh" --program "$train" --plan "$plan" 4 --flops 1e12 \
  --link-bw 1e9 --memory "$memory" -- --layers 4 --d-model 16 --ffn 32 --batch 64 2>&1)
check "without --memory-savers nothing fits in $memory bytes" \
  contains "recommendation: none of the reports fits"
check "and the sweep names --memory-savers" contains "plan-layouts: --memory-savers adds each layout"
savers_sweep chosen.json 1e12 --checkpoint-every 2
check "with --checkpoint-every in the model flags, only per-pass FSDP is added: 17 priced" \
  contains "plan-layouts: 17 layouts priced, 2 skipped"
gpt_sweep() {  # gpt_sweep JSON [MODEL FLAGS...]
  local json=$1
  shift
  output=$(bash "$root/scripts/plan-layouts.sh" --program "$gpt" --plan "$plan" --out gpt 4 \
    --flops 1e12 --link-bw 1e9 --memory 1e12 --json "$json" -- --layers 2 --batch 2 --seq 16 \
    --heads 4 --head-dim 8 --ffn 32 "$@" 2>&1)
}
gpt_sweep gpt.json
status=$?
check "the tpx-gpt sweep succeeds" test "$status" -eq 0
check "9 tpx-gpt layouts priced" contains "plan-layouts: 9 layouts priced, 0 skipped"
check "each mesh whose X has 2 or more ranks is followed by its context-parallel layout" \
  priced_in_order gpt.json 1x4 2x2 2x2-cp 4x1 4x1-cp 2x1x2 2x2x1 2x2x1-cp 4x1x1
check "a layout that leaves ranks without a row says so" \
  contains "plan-layouts: 4x1: ranks without a row: 2 of the 4 of R x X (--batch 2)"
check "one that does not, says nothing" not_contains "plan-layouts: 2x2: "
described() {  # described STEM TEXT: the dry-run report of STEM says TEXT
  python3 -c 'import json, sys; sys.exit(sys.argv[2] not in json.load(open(sys.argv[1]))["description"])' \
    "gpt/$1.json" "$2"
}
not_described() { ! described "$@"; }
check "a -cp report is context-parallel" described 4x1-cp "context parallel over X"
check "its mesh's own is not" not_described 4x1 "context parallel"
check "the tpx-gpt layouts overlap FSDP's collectives (--overlap on)" \
  described 2x2 "FSDP collectives in the background"
check "and tpx-plan prices what they hide" python3 - gpt.json <<'PY'
import json, sys
row = {r["report"]: r for r in json.load(open(sys.argv[1]))["rows"]}["2x2.json"]
sys.exit(0 if 0 < row["comm_background_ms"] and row["step_ms"] < row["step_ms_without_overlap"] else 1)
PY
gpt_sweep gpt-fused.json --fused-attention
check "with --fused-attention the -cp layouts are load-balanced" \
  described 2x2-cp "context parallel over X (load-balanced)"
gpt_sweep gpt-chosen.json --context-parallel --overlap off
check "with --context-parallel in the model flags no -cp layout is added: 6 priced" \
  contains "plan-layouts: 6 layouts priced, 0 skipped"
check "with --overlap off in the model flags nothing overlaps" not_described 2x2 "in the background"
output=$(bash "$root/scripts/plan-layouts.sh" --program "$train" --plan "$plan" --jobs 0 4 2>&1)
status=$?
check "--jobs 0 is refused" test "$status" -eq 2
check "the refusal says what --jobs must be" contains "plan-layouts: --jobs must be a whole number > 0"
output=$(bash "$root/scripts/plan-layouts.sh" --program "$train" --plan "$plan" 0 -- --layers 4 2>&1)
status=$?
check "N = 0 is refused" test "$status" -eq 2
check "the refusal says what N must be" contains "plan-layouts: N must be a whole number > 0, got '0'"
((failures == 0)) || { echo "$failures check(s) failed"; exit 1; }

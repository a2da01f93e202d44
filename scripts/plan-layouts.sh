#!/usr/bin/env bash
# Which layout to train a model with on N devices, in one command: dry-runs an example trainer
# (--dry-run: the real step on meta tensors, nothing computed) on every mesh of N ranks, for
# tpx-gpt with and without context parallelism, for tpx-train also every cut into pipeline stages
# in each schedule, then prices all the reports with tpx-plan --reports on a hardware profile and
# prints its table and recommendation.
#
#   scripts/plan-layouts.sh 8 --hardware h100 --axis-link-bw X=50e9 -- --layers 16 \
#       --d-model 4096 --ffn 16384 --batch 16384 --bf16
#
# N comes first; the flags after it, up to `--`, are tpx-plan's (the profile, --axis-link-bw,
# --json); those after `--` are the trainer's model flags, as for a run (not --mesh, --pipeline,
# --microbatches or --schedule, which this sweeps). The layouts:
#   - every XxY of N ranks, and for tpx-gpt every RxXxY with R > 1 replicas (HSDP);
#   - for tpx-gpt, each of those whose X has more than one rank also with context parallelism
#     (STEM-cp: --context-parallel, X splitting every sequence instead of the batch; with
#     --fused-attention in the model flags also --load-balance), unless the model flags choose it;
#   - for tpx-train, every P x X x Y with P > 1 stages, in each schedule of --schedules, over
#     --microbatches M;
#   - each with the program's overlap of communication and computation (--overlap on: FSDP's
#     gathers and reduce-scatters of the blocks, a pipeline's passes between stages), unless the
#     model flags set --overlap: tpx-plan prices the traffic of background tasks as hidden behind
#     the products and the rest as not;
#   - with --memory-savers, each of the above also with what trades time for memory: activation
#     checkpointing (STEM-ckpt: --checkpoint-every sqrt) and, for a pipeline whose X has more than
#     one rank, FSDP's collectives in every pass (STEM-perpass: --fsdp-per-pass; STEM-ckpt-perpass:
#     both), unless the model flags set them. tpx-plan recommends the fastest layout that fits, so
#     a saver wins only where the faster layouts do not fit (a sweep where none fits says so).
# A layout the trainer refuses (layers or batch that do not cut evenly) is listed as skipped with
# its reason; one that leaves ranks without work (fewer rows or key heads than ranks to split
# them over) is priced, with the dry run's note naming them. Options, before N:
#   --program PATH     the trainer (default build/default/examples/tpx-train; tpx-gpt works too)
#   --plan PATH        tpx-plan (default build/default/examples/tpx-plan)
#   --microbatches M   a pipeline's microbatches (default 8)
#   --schedules LIST   the pipelines' schedules, comma-separated (default
#                      1f1b,zero-bubble,interleaved,zero-bubble-v: GPipe has 1F1B's bubble and
#                      holds more)
#   --out DIR          keep the reports in DIR (default: a temporary folder, removed)
#   --plot PNG         draw the priced layouts into PNG as well (scripts/plot-plan.sh)
#   --jobs J           dry runs at once (default: the cores, nproc)
#   --memory-savers    also each layout with activation checkpointing and per-pass FSDP (above)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
program=$root/build/default/examples/tpx-train
plan=$root/build/default/examples/tpx-plan
microbatches=8
schedules=1f1b,zero-bubble,interleaved,zero-bubble-v
out=""
plot=""
jobs=$(nproc 2>/dev/null || echo 1)
memory_savers=0
usage() {
  echo "usage: $0 [--program PATH] [--plan PATH] [--microbatches M] [--schedules LIST] [--out DIR]" \
       "[--plot PNG] [--jobs J] [--memory-savers] N [TPX-PLAN FLAGS...] -- [MODEL FLAGS...]" >&2
  exit 2
}
while (($#)) && [[ $1 == --* ]]; do
  if [[ $1 == --memory-savers ]]; then
    memory_savers=1
    shift
    continue
  fi
  (($# >= 2)) || usage
  case $1 in
    --program) program=$2 ;;
    --plan) plan=$2 ;;
    --microbatches) microbatches=$2 ;;
    --schedules) schedules=$2 ;;
    --out) out=$2 ;;
    --plot) plot=$2 ;;
    --jobs) jobs=$2 ;;
    *) echo "plan-layouts: unknown option $1" >&2; usage ;;
  esac
  shift 2
done
(($#)) || usage
ranks=$1
shift
[[ $ranks =~ ^[1-9][0-9]*$ ]] || { echo "plan-layouts: N must be a whole number > 0, got '$ranks'" >&2; exit 2; }
[[ $microbatches =~ ^[1-9][0-9]*$ ]] ||
  { echo "plan-layouts: --microbatches must be a whole number > 0, got '$microbatches'" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] ||
  { echo "plan-layouts: --jobs must be a whole number > 0, got '$jobs'" >&2; exit 2; }
plan_flags=()
while (($#)) && [[ $1 != -- ]]; do plan_flags+=("$1"); shift; done
(($#)) && shift  # the --
model_flags=("$@")
for exe in "$program" "$plan"; do
  [[ -x $exe ]] || { echo "plan-layouts: $exe is not built (cmake --build --preset default)" >&2; exit 2; }
done
[[ -z $plot ]] || command -v gnuplot >/dev/null ||
  { echo "plan-layouts: --plot needs gnuplot (gnuplot-nox: scripts/install-deps.sh)" >&2; exit 2; }
help=$("$program" --help 2>&1)
has_pipeline=0 has_replicas=0 has_context=0
[[ $help == *--pipeline* ]] && has_pipeline=1
[[ $help == *RxXxY* ]] && has_replicas=1
[[ $help == *--context-parallel* ]] && has_context=1

if [[ -z $out ]]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
else
  mkdir -p "$out"
fi

# The layouts, as "file-stem|trainer flags", each followed by its memory savers' variants, a
# mesh's context-parallel layout after its own.
layouts=()
model_flags_have() {  # model_flags_have FLAG: the model flags give FLAG (or FLAG=VALUE)
  [[ " ${model_flags[*]} " == *" $1 "* || " ${model_flags[*]} " == *" $1="* ]]
}
saves_activations=1 saves_gathers=1  # unless the model flags choose these themselves
model_flags_have --checkpoint-every && saves_activations=0
model_flags_have --fsdp-per-pass && saves_gathers=0
model_flags_have --context-parallel && has_context=0
overlap=""  # " --overlap on" where the program takes it
if ! model_flags_have --overlap && [[ $help == *--overlap* ]]; then overlap=" --overlap on"; fi
context_flags="--context-parallel"
model_flags_have --fused-attention && ! model_flags_have --load-balance &&
  context_flags+=" --load-balance"
add_mesh() {  # add_mesh STEM FLAGS X: the layout, and with X > 1 ranks its context-parallel one
  add_layout "$1" "$2" 0
  if ((has_context && $3 > 1)); then add_layout "$1-cp" "$2 $context_flags" 0; fi
  return 0
}
add_layout() {  # add_layout STEM FLAGS PER_PASS_APPLIES
  layouts+=("$1|$2")
  ((memory_savers)) || return 0
  ((saves_activations)) && layouts+=("$1-ckpt|$2 --checkpoint-every sqrt")
  if (($3 && saves_gathers)); then
    layouts+=("$1-perpass|$2 --fsdp-per-pass")
    ((saves_activations)) && layouts+=("$1-ckpt-perpass|$2 --checkpoint-every sqrt --fsdp-per-pass")
  fi
  return 0
}
IFS=, read -r -a schedule_list <<<"$schedules"
for ((p = 1; p <= ranks; ++p)); do
  ((ranks % p == 0)) || continue
  ((p == 1 || has_pipeline)) || continue
  for ((x = 1; x <= ranks / p; ++x)); do
    ((ranks / p % x == 0)) || continue
    y=$((ranks / p / x))
    if ((p == 1)); then
      add_mesh "${x}x${y}" "--mesh ${x}x${y}$overlap" "$x"
    else
      for s in "${schedule_list[@]}"; do
        add_layout "${x}x${y}-p${p}-${s}" \
          "--mesh ${x}x${y} --pipeline $p --microbatches $microbatches --schedule $s$overlap" $((x > 1))
      done
    fi
  done
done
if ((has_replicas)); then
  for ((r = 2; r <= ranks; ++r)); do
    ((ranks % r == 0)) || continue
    for ((x = 1; x <= ranks / r; ++x)); do
      ((ranks / r % x == 0)) || continue
      y=$((ranks / r / x))
      add_mesh "${r}x${x}x${y}" "--mesh ${r}x${x}x${y}$overlap" "$x"
    done
  done
fi

# The dry runs, up to --jobs at once (each runs its ranks one after another, on one core), each
# leaving its output in $out/STEM.out and, when the trainer refuses the layout, $out/STEM.refused.
dry_run() {  # dry_run STEM FLAGS
  rm -f "$out/$1.refused"  # an earlier sweep's, in a kept --out folder
  # shellcheck disable=SC2086  # FLAGS is a list of words
  "$program" --dry-run $2 "${model_flags[@]}" --log "$out/$1.json" >"$out/$1.out" 2>&1 ||
    touch "$out/$1.refused"
}
n=0
for layout in "${layouts[@]}"; do
  stem=${layout%%|*} flags=${layout#*|}
  n=$((n + 1))
  echo "plan-layouts: dry run $n/${#layouts[@]}: $(basename "$program") $flags" >&2
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
  dry_run "$stem" "$flags" &
done
wait
reports=()
skipped=0
for layout in "${layouts[@]}"; do
  stem=${layout%%|*}
  if [[ -e $out/$stem.refused ]]; then
    why=$(grep -m1 -v '^$' "$out/$stem.out" || true)
    echo "plan-layouts: skipped $stem: $why" >&2
    rm -f "$out/$stem.json" "$out/$stem.refused"
    skipped=$((skipped + 1))
  else
    reports+=("$stem.json")
    # The dry run's note on ranks the layout leaves without work (rows, key heads), if any.
    note=$(sed -n 's/^.* --dry-run: note: //p' "$out/$stem.out" | head -n 1)
    [[ -z $note ]] || echo "plan-layouts: $stem: $note" >&2
  fi
  rm -f "$out/$stem.out"
done
((${#reports[@]})) || { echo "plan-layouts: the trainer refused every layout of $ranks ranks" >&2; exit 1; }
echo "plan-layouts: ${#reports[@]} layouts priced, $skipped skipped" >&2
plan_exe=$(cd "$(dirname "$plan")" && pwd)/$(basename "$plan")
# tpx-plan's --json file (and --plot's picture) is relative to where this script was started, not
# to the reports' folder.
json=""
for ((i = 0; i < ${#plan_flags[@]}; ++i)); do
  flag=${plan_flags[i]}
  if [[ $flag == --json ]] && ((i + 1 < ${#plan_flags[@]})); then
    [[ ${plan_flags[i + 1]} == /* ]] || plan_flags[i + 1]=$PWD/${plan_flags[i + 1]}
    json=${plan_flags[i + 1]}
  elif [[ $flag == --json=* ]]; then
    [[ $flag == --json=/* ]] || plan_flags[i]=--json=$PWD/${flag#--json=}
    json=${plan_flags[i]#--json=}
  fi
done
if [[ -n $plot ]]; then
  [[ $plot == /* ]] || plot=$PWD/$plot
  [[ -n $json ]] || { json=$out/plan.json; plan_flags+=(--json "$json"); }
fi
cd "$out"
status=0
priced=$("$plan_exe" --reports "${reports[@]}" "${plan_flags[@]}") || status=$?
printf '%s\n' "$priced"
((status == 0)) || exit "$status"
if ((!memory_savers)) && [[ $priced == *"none of the reports fits"* ]]; then
  echo "plan-layouts: --memory-savers adds each layout with activation checkpointing and, for" \
       "pipelines, per-pass FSDP, which may fit" >&2
fi
[[ -z $plot ]] || bash "$root/scripts/plot-plan.sh" "$json" "$plot" >&2

#!/usr/bin/env bash
# Draws tpx-bench-pipeline's --json file for its two-stage rows: on the left, the share of the
# step a stage idles, measured (solid, the passes in the step) beside its schedule's bubble
# (dashed), against the microbatches M, one colour per order; on the right, the step's time with
# the passes in the step (solid) and in the background (dashed), beside one stage alone (black).
# The pictures of bench/README.md's "Pipeline stages" tables.
#
#   scripts/plot-pipeline.sh bench/results/pipeline.json bench/figures/pipeline.png
#
# Needs python3 (standard library only) and gnuplot (gnuplot-nox, scripts/install-deps.sh).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=plot-preamble.sh
source "$(dirname "$0")/plot-preamble.sh" PIPELINE.json "$@"

python3 - "$json" "$data" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["bench"] == "pipeline", "not a tpx-bench-pipeline file"
out = sys.argv[2]
rows = [r for r in doc["rows"] if r["stages"] == 2]
if not rows:
    sys.exit("plot-pipeline: the file has no two-stage rows (run the bench with -p 1,2)")
names = {"gpipe": "GPipe", "1f1b": "1F1B", "zb": "zero-bubble",
         "il2": f'interleaved ({doc["settings"]["chunks"]} chunks)', "zbv": "zero-bubble V"}
orders = [o for o in names if any(r["order"] == o for r in rows)]
for o in orders:
    by_m = {}
    for r in rows:
        if r["order"] == o:
            by_m.setdefault(r["microbatches"], {})[r["passes"]] = r
    with open(f"{out}/{o}.dat", "w") as f:
        for m in sorted(by_m):
            step, background = by_m[m].get("step"), by_m[m].get("background")
            first = step or background
            f.write(f'{m} {step["idle"] if step else "NaN"} {first["bubble"]} '
                    f'{step["step_ms"] if step else "NaN"} '
                    f'{background["step_ms"] if background else "NaN"}\n')
with open(f"{out}/one_stage.dat", "w") as f:
    seen = {}
    for r in rows:
        seen[r["microbatches"]] = r["one_stage_ms"]
    for m in sorted(seen):
        f.write(f"{m} {seen[m]}\n")
with open(f"{out}/orders.txt", "w") as f:
    f.write(" ".join(orders) + "\n")
with open(f"{out}/titles.txt", "w") as f:
    f.write("\n".join(names[o] for o in orders) + "\n")
s = doc["settings"]
with open(f"{out}/title.txt", "w") as f:
    f.write(f'tpx host backend, 2 stages on {doc["machine"]["cores"]} cores: {s["layers"]} layers '
            f'of width {s["width"]}, batch {s["batch"]}, fp32')
PY

read -r -a orders < "$data/orders.txt"
mapfile -t titles < "$data/titles.txt"
colours=('#1b9e77' '#d95f02' '#7570b3' '#e7298a' '#66a61e')
idle_plot="" step_plot=""
for i in "${!orders[@]}"; do
  f="$data/${orders[$i]}.dat" c=${colours[$i]} t=${titles[$i]}
  idle_plot+="'$f' using 1:2 with linespoints lw 2 pt 7 lc rgb '$c' title '$t', "
  idle_plot+="'$f' using 1:3 with lines dt 2 lw 1.5 lc rgb '$c' notitle, "
  step_plot+="'$f' using 1:4 with linespoints lw 2 pt 7 lc rgb '$c' title '$t', "
  step_plot+="'$f' using 1:5 with linespoints dt 2 lw 1.5 pt 6 lc rgb '$c' notitle, "
done
step_plot+="'$data/one_stage.dat' using 1:2 with linespoints lw 2 pt 5 lc rgb 'black' title 'one stage alone'"

gnuplot <<GP
set terminal pngcairo size 1600,650 font ",11" noenhanced
set output '$png'
set multiplot layout 1,2 title "$(cat "$data/title.txt")"
set logscale x 2
set xlabel 'microbatches M'
set grid
set key top right
set title 'share of the step a stage idles: measured (solid), the schedule bubble (dashed)'
set ylabel 'idle share'
set yrange [0:*]
plot ${idle_plot%, }
set title 'step time: passes in the step (solid), in the background (dashed)'
set ylabel 'ms per step'
set yrange [*:*]
set key top left
plot $step_plot
unset multiplot
GP
echo "wrote $png"

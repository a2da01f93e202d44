#!/usr/bin/env bash
# Draws tpx-bench-matmul-strategies' --json file: for every row (the four sharded-matmul cases
# and each MLP layout at each batch, forward and backward pass), the measured time split into compute and communication
# beside the cost model's predicted split, as stacked bars, with the unsharded time as a point.
#
#   scripts/plot-strategies.sh bench/results/matmul_strategies.json bench/figures/strategies.png
#
# Needs python3 (standard library only) and gnuplot (gnuplot-nox, scripts/install-deps.sh).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=plot-preamble.sh
source "$(dirname "$0")/plot-preamble.sh" STRATEGIES.json "$@"

python3 - "$json" "$data" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["bench"] == "matmul_strategies", "not a tpx-bench-matmul-strategies file"
with open(f"{sys.argv[2]}/rows.dat", "w") as f:
    for r in doc["rows"]:
        label = r["name"] + (f' B={r["m"]}' if r["kind"] == "layer" else "")
        label += " bwd" if r.get("pass") == "backward" else ""
        label += f' ({r["mesh"]})'
        f.write(f'"{label}" {r["measured_compute_ms"]} {r["measured_comm_ms"]} '
                f'{r["predicted_compute_ms"]} {r["predicted_comm_ms"]} {r["unsharded_ms"]}\n')
with open(f"{sys.argv[2]}/title.txt", "w") as f:
    ranks = doc["settings"]["ranks"]
    ranks = " and ".join(map(str, ranks)) if isinstance(ranks, list) else ranks
    f.write(f'tpx host backend, {ranks} ranks on {doc["machine"]["cores"]} cores: '
            f'measured (left) and predicted (right) time, fp32')
PY

gnuplot <<GP
set terminal pngcairo size 2000,700 font ",10" noenhanced
set bmargin 9
set rmargin 12
set output '$png'
set title "$(cat "$data/title.txt")"
set style data histograms
set style histogram rowstacked
set style fill solid 0.8 border -1
set boxwidth 0.35
set ylabel 'ms per run'
set logscale y 2
set format y '%g'
set yrange [1:*]
set xtics rotate by -40 scale 0
set key top left
set grid ytics
plot '$data/rows.dat' using (\$0-0.2):(\$2+\$3):(0.35) with boxes lc rgb '#d95f02' title 'measured comm', \
     '' using (\$0-0.2):2:(0.35) with boxes lc rgb '#1b9e77' title 'measured compute', \
     '' using (\$0+0.2):(\$4+\$5):(0.35) with boxes lc rgb '#fdb863' title 'predicted comm', \
     '' using (\$0+0.2):4:(0.35):xtic(1) with boxes lc rgb '#80cdc1' title 'predicted compute', \
     '' using 0:6 with points pt 7 ps 1.3 lc rgb 'black' title 'unsharded (1 rank)'
GP
echo "wrote $png"

#!/usr/bin/env bash
# Draws tpx-bench-roofline's --json file as a roofline: measured GFLOP/s of each GEMM shape
# against its arithmetic intensity, under min(peak, I * bandwidth), log-log, as a PNG.
#
#   scripts/plot-roofline.sh bench/results/roofline.json bench/figures/roofline.png
#
# Needs python3 (standard library only) and gnuplot (gnuplot-nox, scripts/install-deps.sh).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=plot-preamble.sh
source "$(dirname "$0")/plot-preamble.sh" ROOFLINE.json "$@"

python3 - "$json" "$data" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["bench"] == "roofline", "not a tpx-bench-roofline file"
with open(f"{sys.argv[2]}/points.dat", "w") as f:
    for r in doc["rows"]:
        f.write(f'{r["intensity"]} {r["gflops"]} "{r["m"]}x{r["k"]}x{r["n"]}"\n')
s = doc["settings"]
with open(f"{sys.argv[2]}/roof.gp", "w") as f:
    f.write(f'peak = {s["peak_gflops"]}\nbw = {s["memory_gbps"]}\n')
    f.write(f'machine = "{doc["machine"]["cpu"]}, 1 thread"\n')
PY

gnuplot <<GP
load '$data/roof.gp'
set terminal pngcairo size 1000,620 font ",10" noenhanced
set output '$png'
set title sprintf("host sgemm roofline (%s): peak %.1f GFLOP/s, memory %.1f GB/s", machine, peak, bw)
set logscale xy 2
set format x '%g'
set format y '%g'
set xlabel 'arithmetic intensity I = 2mkn / (4 (mk + kn + mn))  (FLOP/byte)'
set ylabel 'GFLOP/s'
set key top left
set grid
set xrange [0.25:512]
roof(x) = x * bw < peak ? x * bw : peak
plot roof(x) with lines lw 2 title 'roofline min(peak, I x bw)', \
     '$data/points.dat' using 1:2 with points pt 7 ps 1.2 title 'tpx::kernels::gemm', \
     '' using 1:2:3 with labels offset 0,1 font ",8" notitle
GP
echo "wrote $png"

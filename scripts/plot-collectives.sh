#!/usr/bin/env bash
# Draws bus bandwidth against message size from tpx-bench-collectives' --json file: one line per
# collective (out of place), with the single-thread memcpy and the all-ranks memcpy of the same
# sizes for reference, log-log, as a PNG.
#
#   scripts/plot-collectives.sh bench/results/collectives.json bench/figures/collectives.png
#
# Needs python3 (standard library only, to turn the JSON into columns) and gnuplot
# (gnuplot-nox, installed by scripts/install-deps.sh).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=plot-preamble.sh
source "$(dirname "$0")/plot-preamble.sh" COLLECTIVES.json "$@"

# One file per collective: size (B), out-of-place busbw; and memcpy.dat: size, 1 thread, all ranks.
python3 - "$json" "$data" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["bench"] == "collectives", "not a tpx-bench-collectives file"
rows = doc["rows"]
ops = []
for r in rows:
    if r["op"] not in ops:
        ops.append(r["op"])
for op in ops:
    with open(f"{sys.argv[2]}/{op}.dat", "w") as f:
        for r in rows:
            if r["op"] == op:
                f.write(f'{r["size"]} {r["oop_busbw"]}\n')
with open(f"{sys.argv[2]}/memcpy.dat", "w") as f:
    for r in rows:
        if r["op"] == ops[0]:
            f.write(f'{r["size"]} {r["memcpy_gbps"]} {r["all_ranks_memcpy_gbps"]}\n')
with open(f"{sys.argv[2]}/title.txt", "w") as f:
    f.write(f'tpx host collectives, {rows[0]["ranks"]} ranks on {doc["machine"]["cores"]} cores '
            f'({doc["machine"]["cpu"]})')
with open(f"{sys.argv[2]}/ops.txt", "w") as f:
    f.write(" ".join(ops))
EOF

plots=""
for op in $(cat "$data/ops.txt"); do
  plots+="'$data/$op.dat' using 1:2 with linespoints title '$op busbw', "
done
plots+="'$data/memcpy.dat' using 1:2 with lines dashtype 2 lw 2 title 'memcpy, 1 thread', "
plots+="'$data/memcpy.dat' using 1:3 with lines dashtype 3 lw 2 title 'memcpy, all ranks at once (total)'"

gnuplot <<EOF
set terminal pngcairo size 1000,620 font ",10" noenhanced
set output '$png'
set title "$(cat "$data/title.txt")"
set logscale xy 2
set format y '%g'
set format x '%.0b%B'
set xlabel 'message size S (bytes)'
set ylabel 'GB/s (busbw: nccl-tests definition; out of place)'
set key top left
set grid
plot $plots
EOF
echo "wrote $png"

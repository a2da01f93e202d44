#!/usr/bin/env bash
# Draws tpx-plan --reports' --json file (scripts/plan-layouts.sh --plot draws its sweep so): one
# group of bars per layout, fastest first, its compute time (a pipeline's with its bubble) beside
# its communication time (the rank that communicates longest), a mark at its step as the program
# overlaps the two (its dry run's timeline replayed: a background task hidden behind the products
# the program computes before it waits for the task) and a hollow one at the bound where all of
# it were hidden (the longer of the two).
# The recommended layout's name carries a star;
# a layout whose tensors do not fit in the profile's memory is drawn pale. The picture of
# bench/README.md's "Every layout at once".
#
#   scripts/plot-plan.sh plan.json bench/figures/plan-layouts.png
#
# Needs python3 (standard library only) and gnuplot (gnuplot-nox, scripts/install-deps.sh).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=plot-preamble.sh
source "$(dirname "$0")/plot-preamble.sh" PLAN.json "$@"

python3 - "$json" "$data" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = doc.get("rows") if isinstance(doc, dict) and doc.get("bench") == "tpx-plan" else None
if not rows or "report" not in rows[0]:
    sys.exit(f"plot-plan: {sys.argv[1]} is not tpx-plan's --json of --reports")
out = sys.argv[2]
rows = sorted(rows, key=lambda r: r["step_ms"])
# x, name, compute ms, its colour, communication ms, its colour (pale where it does not fit),
# step ms, step ms with all communication hidden
colours = {True: (0x1b9e77, 0xd95f02), False: (0xb8e0d4, 0xf5c9a6)}
with open(f"{out}/layouts.dat", "w") as f:
    for x, r in enumerate(rows):
        name = r["report"].rsplit("/", 1)[-1].removesuffix(".json")
        if r["report"] == doc["recommendation"]:
            name = "* " + name
        compute, comm = colours[bool(r["fits"])]
        f.write(f'{x} "{name}" {r["compute_ms"]} {compute} {r["comm_ms"]} {comm} {r["step_ms"]} {r["step_ms_all_hidden"]}\n')
m = doc["machine"]
# The axes tpx-plan's command line gave links of their own: --axis-link-bw X=50e9 (or =X=50e9).
words = doc["command"].replace("--axis-link-bw=", "--axis-link-bw ").split()
links = "".join(f", {w.split('=')[0]} at {float(w.split('=')[1]):.3g} B/s"
                for flag, w in zip(words, words[1:]) if flag == "--axis-link-bw")
with open(f"{out}/title.txt", "w") as f:
    f.write(f'tpx-plan: {len(rows)} layouts priced on {m["name"]} ({m["flops"]:.3g} FLOP/s, '
            f'{m["link_bw"]:.3g} B/s per link{links}); * recommended, pale: does not fit')
PY

# 1600 pixels wide, or 28 per layout where more (a sweep with --memory-savers prices dozens), so
# that the names under the bars do not run into each other.
layouts=$(wc -l <"$data/layouts.dat")
width=$((layouts * 28 + 200 > 1600 ? layouts * 28 + 200 : 1600))
gnuplot <<GP
set terminal pngcairo size $width,760 font ",11" noenhanced
set output '$png'
set title "$(cat "$data/title.txt")"
set style fill solid 0.9 border -1
set boxwidth 0.38
set logscale y
set ylabel 'ms per step (log scale)'
set grid ytics
set xtics rotate by -45 nomirror
set xrange [-0.7:*]
set rmargin 14  # the last names, slanting right
set key top left
# The bars take each row's colour; the key, the colours of a layout that fits.
plot '$data/layouts.dat' using (\$1 - 0.2):3:4:xtic(2) with boxes lc rgb variable notitle, \
     '' using (\$1 + 0.2):5:6 with boxes lc rgb variable notitle, \
     '' using 1:7 with points pt 7 ps 1.3 lc rgb 'black' title 'step, as the program overlaps', \
     '' using 1:8 with points pt 6 ps 1.3 lc rgb 'black' title 'step, were all communication hidden', \
     keyentry with boxes lc rgb '#1b9e77' title 'compute (with the bubble)', \
     keyentry with boxes lc rgb '#d95f02' title 'communication, longest rank'
GP
echo "wrote $png"

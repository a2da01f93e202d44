#!/usr/bin/env bash
# Draws the loss curve of a tpx-train or tpx-gpt run: scripts/plot-loss.sh LOG.jsonl OUT.png
#
# LOG.jsonl is what `tpx-train --log` or `tpx-gpt --log` writes (one JSON object per step). The
# raw per-step loss is drawn faintly, with a 20-step moving average over it. Needs gnuplot (scripts/install-deps.sh
# installs gnuplot-nox).
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 LOG.jsonl OUT.png" >&2
  exit 2
fi
log=$1 out=$2
[[ -s $log ]] || { echo "plot-loss: $log is missing or empty" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot-loss: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
data=$(mktemp)
trap 'rm -f "$data"' EXIT
# Columns: step, loss, mean of the last 20 losses.
sed -nE 's/.*"step": *([0-9]+).*"loss": *([-0-9.eE+]+).*/\1 \2/p' "$log" |
  awk '{ w[NR % 20] = $2; n = NR < 20 ? NR : 20; s = 0; for (i in w) s += w[i]; print $1, $2, s / n }' >"$data"
[[ -s $data ]] || { echo "plot-loss: no step/loss pairs in $log" >&2; exit 1; }
gnuplot <<GNUPLOT
set terminal pngcairo size 900,500 font "sans,11"
set output "$out"
set title "loss per step ($(basename "$log"))"
set xlabel "step"
set ylabel "cross-entropy (nats per byte)"
set grid
set key top right
plot "$data" using 1:2 with lines lc rgb "#b0c4de" title "loss", \
     "$data" using 1:3 with lines lw 2 lc rgb "#1f4e8c" title "20-step mean"
GNUPLOT
echo "plot-loss: wrote $out"

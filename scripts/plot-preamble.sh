# shellcheck shell=bash disable=SC2034  # json, png and data are for the script that sources this
# Sourced by the plot-*.sh scripts that draw one of tpx's JSON files with gnuplot, with the kind
# of file the script draws and the script's own arguments:
#
#   source "$(dirname "$0")/plot-preamble.sh" PIPELINE.json "$@"
#
# Checks for the two arguments (the JSON file, the PNG to write) and for python3 and gnuplot, and
# sets json and png to them and data to a temporary folder, removed when the script exits.
if (($# != 3)); then
  echo "usage: $0 $1 OUT.png" >&2
  exit 2
fi
json=$2 png=$3
for tool in python3 gnuplot; do
  command -v "$tool" >/dev/null ||
    { echo "$(basename "$0" .sh): $tool not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT

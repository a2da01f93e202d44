#!/usr/bin/env bash
# The main demo, from a fresh Debian/Ubuntu machine: install what is missing, build the example
# FSDP + TP trainer, train a byte-level language model for 300 steps on a 2x2 mesh of host
# threads (FSDP over X, tensor parallelism over Y), and draw its loss curve.
#   bash scripts/demo.sh [extra tpx-train flags, e.g. --mesh 4x2 --bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target tpx-train
mkdir -p build/demo
./build/default/examples/tpx-train --mesh 2x2 --steps 300 --log build/demo/train.jsonl "$@"
bash scripts/plot-loss.sh build/demo/train.jsonl build/demo/loss.png

#!/usr/bin/env bash
# Checks tpx's CUDA backend on a machine with NVIDIA GPUs in one command, and prints a summary:
#
#   bash scripts/gpu-check.sh          # build, every CUDA test, every CUDA bench
#   TPX_JOBS=8 bash scripts/gpu-check.sh
#
#   1 the GPUs (nvidia-smi) and the toolkit (nvcc)
#   2 build the cuda preset (cmake --preset cuda; cmake --build --preset cuda): every CUDA test
#     and bench, with nvcc, warnings as errors
#   3 run every CUDA test (ctest --preset cuda, label cuda): each kernel and GEMM against the
#     host on the same inputs; every collective and the typed program on the simulated mesh and,
#     with 2 or more GPUs, over NCCL
#   4 train the example trainer for 100 steps on a 2x2 simulated mesh (tpx-train-cuda; its loss
#     against the host run is cuda_trainer_test's, in step 3)
#   5 run the benches (tpx-bench-cuda): GEMM through tpx vs cuBLASLt directly (target ratio
#     >= 0.95), kernel bandwidth vs device memcpy (target >= 0.8 for elementwise and norms), and
#     the collectives in nccl-tests format on the simulated mesh (4 ranks on GPU 0) and, with 2
#     or more GPUs, over NCCL on all of them. Tables go to the terminal, JSON to
#     build/cuda/gpu-check/.
#
# The exit status is 0 when every step passed (a step with nothing to do counts as skipped, not
# failed), 1 otherwise. Without a GPU the build still runs and everything else reports skipped.
set -uo pipefail
cd "$(dirname "$0")/.."

jobs=${TPX_JOBS:-$(nproc)}
out=build/cuda/gpu-check
summary=()
failed=0

step() {  # step NAME COMMAND...: runs it, records passed/FAILED with its time
  local name=$1 start=$SECONDS
  shift
  echo "=== $name"
  if "$@"; then
    summary+=("passed   $name ($((SECONDS - start)) s)")
  else
    summary+=("FAILED   $name ($((SECONDS - start)) s)")
    failed=1
  fi
}
skip() { summary+=("skipped  $1: $2"); }

echo "=== GPUs"
gpus=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L; then
  gpus=$(nvidia-smi -L | grep -c '^GPU')
fi
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$nvcc" --version | tail -n 2 || { echo "gpu-check: no nvcc (install the CUDA toolkit)" >&2; exit 1; }

export CUDACXX=$nvcc CMAKE_BUILD_PARALLEL_LEVEL=$jobs
step "build (cuda preset)" bash -c 'cmake --preset cuda >/dev/null && cmake --build --preset cuda'
bench=build/cuda/bench/cuda/tpx-bench-cuda
train=build/cuda/examples/tpx-train-cuda

if ((failed == 0)); then
  step "CUDA tests" ctest --preset cuda
else
  skip "CUDA tests" "the build failed"
fi

if ((gpus == 0)); then
  skip "trainer" "no GPU (nvidia-smi lists none)"
elif ((failed != 0)); then
  skip "trainer" "the build or the tests failed"
else
  mkdir -p "$out"
  step "trainer (tpx-train-cuda, 2x2 mesh on GPU 0)" \
    "$train" --mesh 2x2 --steps 100 --log-every 20 --log "$out/train.jsonl"
fi

if ((gpus == 0)); then
  skip "benches" "no GPU (nvidia-smi lists none)"
elif ((failed != 0)); then
  skip "benches" "the build or the tests failed"
else
  mkdir -p "$out"
  step "bench gemm" bash -o pipefail -c "$bench gemm -b 1024 -e 8192 --json $out/gemm.json | tee $out/gemm.txt"
  step "bench kernels" bash -o pipefail -c "$bench kernels -N 64M -d 4096 --json $out/kernels.json | tee $out/kernels.txt"
  step "bench collectives, simulated mesh (4 ranks on GPU 0)" \
    bash -c "$bench collectives -g 4 -b 1K -e 64M --json $out/collectives-simulated.json"
  if ((gpus >= 2)); then
    step "bench collectives, NCCL ($gpus GPUs)" \
      bash -c "$bench collectives --nccl -g $gpus -b 1K -e 256M --json $out/collectives-nccl.json"
  else
    skip "bench collectives, NCCL" "needs 2 GPUs, found $gpus"
  fi
  # The figures the issue sets targets for, from the tables above.
  [[ -f $out/gemm.txt ]] && awk '$1 ~ /^(fp32|tf32|bf16|fp16)$/ { if (min == "" || $5 < min) min = $5 }
    END { if (min != "") printf "GEMM tpx / cuBLASLt direct: worst ratio %.3f (target >= 0.95)\n", min }' \
    "$out/gemm.txt" >"$out/figures.txt"
  [[ -f $out/kernels.txt ]] && awk '/^  (add|gelu|bias|rmsnorm fwd|layernorm fwd)/ { if (min == "" || $NF < min) { min = $NF; k = $0 } }
    END { if (min != "") printf "elementwise and norm kernels / memcpy: worst ratio %.3f (target >= 0.8)\n", min }' \
    "$out/kernels.txt" >>"$out/figures.txt"
fi

echo "=== summary ($gpus GPU(s))"
printf '%s\n' "${summary[@]}"
[[ -f $out/figures.txt ]] && cat "$out/figures.txt"
exit $failed

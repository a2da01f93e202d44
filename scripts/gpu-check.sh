#!/usr/bin/env bash
# Checks tpx's CUDA backend on a machine with NVIDIA GPUs in one command, and prints a summary:
#
#   bash scripts/gpu-check.sh                  # everything below
#   bash scripts/gpu-check.sh tests trainer    # the build, then only these parts
#   TPX_JOBS=8 TPX_GPU_STEP_SECONDS=240 TPX_GPU_CHECK_OUT=/tmp/figures bash scripts/gpu-check.sh
#   TPX_GPU_PREBUILT=1 bash scripts/gpu-check.sh tests    # build/cuda built elsewhere, used as is
#
# Parts (arguments; none: all): tests, memcheck, trainer, bench, peers-train, peers-gpt,
# peers-attention (peers: the three), profile. The build runs first whatever is asked (a no-op when
# build/cuda is up to date), so a GPU lent for minutes can be used in short calls: the build and
# the tests in one, the peers in the next, each well inside its limit. TPX_GPU_STEP_SECONDS
# caps every step, the build too (timeout(1); a step cut off counts as failed, saying so), so
# that one hung collective cannot take the whole lease; TPX_GPU_CHECK_OUT is where logs, JSON
# and figures.txt go (default build/cuda/gpu-check), e.g. a folder that a remote runner copies
# back even when the command is cut off. TPX_GPU_CHECK_ARCHIVE=FILE packs that folder into one
# .tgz at the end, for a runner that brings back only a few files (the probe's scratch left
# out), and the summary closes with the head of each table the profile and peers parts wrote,
# for a runner that brings back only the output's end.
#
#   1 the GPUs (nvidia-smi), the tools (CMake >= 3.25, Ninja, a C++ compiler, nvcc) and the
#     libraries, found as the build finds them; what is missing is listed, all at once, with
#     where to get it, and the script stops
#   2 build the cuda preset (cmake --preset cuda; cmake --build --preset cuda): every CUDA test
#     and bench, with nvcc, for the architectures of the GPUs present (TPX_CUDA_ARCHITECTURES
#     overrides); warnings are not errors here (TPX_WERROR=OFF, as a user's compiler may warn
#     where CI's does not; TPX_WERROR=ON in the environment checks as CI does). With
#     TPX_GPU_PREBUILT=1 nothing is built: build/cuda is used as found, compiled on another
#     machine at the same path (a login node for the GPU nodes; a GPU lent for minutes, whose
#     minutes should not go to nvcc) for these GPUs' architectures, or unpacked from the
#     .gpu/build.tgz that scripts/gpu-prepare.sh --build made there
#   3 run every CUDA test (ctest --preset cuda, label cuda): each kernel and GEMM against the
#     host on the same inputs; every collective and the typed program on the simulated mesh and,
#     with 2 or more GPUs, over NCCL (prebuilt: all but the consumer builds, which would compile
#     with the build machine's tools)
#   4 compute-sanitizer memcheck on the kernel tests (cuda_kernels_test, cuda_nn_layers_test)
#     and racecheck on cuda_kernels_test (shared-memory hazards of the block reductions and the
#     tensor-core attention), when compute-sanitizer is on PATH
#   5 train the example trainer for 100 steps on a 2x2 simulated mesh, 100 steps on a 1x1 mesh
#     recorded once as a CUDA graph and replayed (--cuda-graph), and 50 steps over NCCL on
#     one GPU (tpx-train-cuda --backend nccl --mesh 1x1; their losses against the host run are
#     cuda_trainer_test's, in step 3), and the GPT example (tpx-gpt-cuda) for 50 steps on a 2x2
#     simulated mesh, with --overlap off and on (logs gpt.jsonl, gpt-overlap.jsonl: tokens/s of
#     each), and over NCCL on one GPU; tpx-train-cuda as one process of a torchrun-style
#     launch of world size 1 (RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 and a free
#     MASTER_PORT: NCCL's id through the TCP rendezvous; NCCL refuses two ranks on one GPU, so
#     launches of more processes need more GPUs); and tpx-train-cuda --pipeline 2 in the
#     zero-bubble V, 2 stages of 1x2 on the simulated mesh, 50 steps
#   6 run the benches (tpx-bench-cuda): GEMM through tpx vs cuBLASLt directly (target ratio
#     >= 0.95), the MLP's GEMM with GELU fused into cuBLASLt's epilogue vs unfused, kernel
#     bandwidth vs device memcpy (target >= 0.8 for elementwise and norms), the fused attention
#     kernels (and, attention-cp.txt, each rank's block of queries under context parallelism
#     of 4, as the GPT's --context-parallel layers call them; attention-gqa.txt, grouped-query
#     attention, 4 key and value heads for 12 query heads), the tensor-core ones under
#     each tiling of attention-tilings (which one to make
#     the kernels' own; attention-tilings.txt, and -gpt.txt in the GPT's [B, T, H, E] layout,
#     failing if one computes wrong), and the collectives in nccl-tests format on the simulated
#     mesh (4 ranks on GPU 0) and, with 2 or more GPUs, over NCCL on all of them. Tables go to
#     the terminal, JSON to build/cuda/gpu-check/.
#   7 the peers (bench/peers/compare.py --gpu): tpx-train-cuda against the same model in PyTorch,
#     eager and torch.compile, fp32 and bf16, samples/s and their ratios from one run;
#     (compare.py --gpt) tpx-gpt-cuda against bench/peers/torch_gpt.py, bf16, at GPT-2 124M's
#     shape: tokens/s, MFU and the ratios; and (compare.py --attention) the fused attention
#     kernels alone (tpx-bench-cuda attention) against PyTorch's scaled_dot_product_attention with
#     the flash backend (bench/peers/torch_sdpa.py), forward and backward, bf16, 16 x 12 heads of
#     64 at T = 1024 and 4096: ms, TFLOP/s and the ratios (target >= 0.9x), and the same with 4
#     key and value heads (grouped-query, SDPA's enable_gqa); when python3 can import torch
#   8 profile: where a step's GPU time goes, at the peers' shapes (bf16, 1x1): phase by phase
#     (--profile-phases: events on the rank's stream, which need no profiler) for 12 steps of
#     tpx-gpt-cuda and tpx-train-cuda, into profile-phases-gpt.txt and profile-phases-mlp.txt,
#     and of tpx-gpt-cuda reading its loss back once (profile-phases-gpt-queued.txt), the same
#     figures in the last line of each run's log (profile-phases-*.jsonl, for scripts); when
#     python3 can import torch, the same models' eager steps in PyTorch marked under the same
#     names (torch_gpt.py, torch_mlp.py --profile-phases) and each table beside tpx's, the
#     largest difference first (bench/peers/phase_compare.py: profile-phases-vs-torch-*.txt);
#     kernel by kernel, with ncu on PATH, 2 steps of tpx-gpt-cuda at GPT-2 124M's shape (fused attention) and of
#     tpx-train-cuda at the MLP peer's, each kernel timed alone (gpu__time_duration.sum), summed
#     by scripts/kernel-profile.py into profile-gpt.txt and profile-mlp.txt: share, ms and
#     launches per step, heaviest first; with nsys on PATH, a profile of 20 steps whose memory
#     copy summary shows what crossed between host and device (one upload of tokens per step,
#     and two 4-byte reads on each reporting step)
#
# The exit status is 0 when every step passed (a step with nothing to do counts as skipped, not
# failed), 1 otherwise. Without a GPU the build still runs and everything else reports skipped.
# Once the build has passed every step runs, failed tests or not: on a GPU lent for minutes, the
# trainer runs, memcheck and figures say more about a failure than its absence would (a figure
# from a build whose tests failed is flagged in the summary, not trusted).
#
# It installs nothing and needs no package manager. Dependencies are found wherever CMake finds
# them: the system, CMAKE_PREFIX_PATH (e.g. Debian packages unpacked offline with dpkg -x under a
# prefix: CMAKE_PREFIX_PATH=<prefix>/usr), CMAKE_INCLUDE_PATH and CMAKE_LIBRARY_PATH (OpenBLAS in
# a multiarch dir), and for NCCL also NCCL_ROOT, the CUDA toolkit and NVIDIA's Python wheel
# (cmake/FindNCCL.cmake). On a machine with apt, scripts/install-deps.sh installs the host ones;
# for one without, scripts/gpu-prepare.sh fetches them elsewhere into .gpu/, unpacked there by
# `source .gpu/setup.sh`.
set -uo pipefail
out=${TPX_GPU_CHECK_OUT:+$(realpath -m "$TPX_GPU_CHECK_OUT")}  # from where it was given
cd "$(dirname "$0")/.."

jobs=${TPX_JOBS:-$(nproc)}
out=${out:-build/cuda/gpu-check}
step_seconds=${TPX_GPU_STEP_SECONDS:-0}
summary=()
failed=0

all_parts=(tests memcheck trainer bench peers-train peers-gpt peers-attention profile)
parts=()
for a in "$@"; do
  case $a in
    all) parts+=("${all_parts[@]}") ;;
    peers) parts+=(peers-train peers-gpt peers-attention) ;;
    tests | memcheck | trainer | bench | peers-train | peers-gpt | peers-attention | profile)
      parts+=("$a") ;;
    *)
      echo "gpu-check: unknown part '$a'; the parts are: ${all_parts[*]}" \
           "(peers: the three; all)" >&2
      exit 2
      ;;
  esac
done
((${#parts[@]})) || parts=("${all_parts[@]}")
if ! [[ $step_seconds =~ ^[0-9]+$ ]]; then
  echo "gpu-check: TPX_GPU_STEP_SECONDS must be a whole number of seconds (0: no limit)," \
       "got '$step_seconds'" >&2
  exit 2
fi
wanted() { [[ " ${parts[*]} " == *" $1 "* ]]; }

step() {  # step NAME COMMAND...: runs it (cut off after TPX_GPU_STEP_SECONDS), records the outcome
  local name=$1 start=$SECONDS status
  shift
  echo "=== $name"
  if ((step_seconds > 0)); then
    timeout --kill-after=10 "$step_seconds" "$@"
  else
    "$@"
  fi
  status=$?
  if ((status == 0)); then
    summary+=("passed   $name ($((SECONDS - start)) s)")
  elif ((step_seconds > 0 && (status == 124 || status == 137))); then
    summary+=("FAILED   $name (cut off after its ${step_seconds} s: TPX_GPU_STEP_SECONDS)")
    failed=1
  else
    summary+=("FAILED   $name ($((SECONDS - start)) s)")
    failed=1
  fi
}
skip() { summary+=("skipped  $1: $2"); }
free_port() {  # a TCP port nothing on this machine listens on, for the rendezvous
  local port
  for port in $(seq 29517 29617); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return; }
  done
  echo 29517
}

echo "=== GPUs"
gpus=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L; then
  gpus=$(nvidia-smi -L | grep -c '^GPU')
fi
nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
# The GPU architectures to compile for: TPX_CUDA_ARCHITECTURES (CMake's list, e.g. "90" or
# "80;90"), else those of the GPUs here (nvidia-smi's compute capabilities, 9.0 -> 90), else the
# project's default (80 and 90). One architecture is one device pass per file instead of two: a
# fifth of the build.
cuda_architectures=${TPX_CUDA_ARCHITECTURES:-}
if [[ -z $cuda_architectures ]] && ((gpus > 0)); then
  cuda_architectures=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
                       tr -d '. ' | sort -u | paste -sd ';')
fi
if [[ -n $cuda_architectures && ! $cuda_architectures =~ ^[0-9]+[a-z]?(\;[0-9]+[a-z]?)*$ ]]; then
  echo "gpu-check: ignoring the GPU architectures '$cuda_architectures' (not a list like 90 or" \
       "80;90), so the build compiles for the project's default" >&2
  cuda_architectures=
fi

# What the build needs, each found as the build finds it; everything missing is listed at once.
echo "=== tools and libraries"
missing=()
cmake_version=$(cmake --version 2>/dev/null | awk 'NR == 1 { print $3 }')
if [[ -z $cmake_version ]]; then
  missing+=("CMake >= 3.25 (apt: cmake; offline: pip install 'cmake>=3.25', or cmake.org's tarball)")
elif ! printf '3.25\n%s\n' "$cmake_version" | sort -V -C; then
  missing+=("CMake >= 3.25, found $cmake_version (pip install 'cmake>=3.25')")
fi
command -v ninja >/dev/null || missing+=("Ninja, the presets' generator (apt: ninja-build; pip install ninja)")
command -v "${CXX:-c++}" >/dev/null || missing+=("a C++20 compiler, g++ >= 12 or clang >= 14 (apt: g++)")
if "$nvcc" --version >/dev/null 2>&1; then
  "$nvcc" --version | tail -n 2
else
  missing+=("nvcc, the CUDA toolkit (put its bin/ on PATH, or set CUDACXX=/path/to/nvcc)")
fi
if ((${#missing[@]} == 0)); then
  # A throwaway project asking for tpx's libraries the way CMakeLists.txt, tests/ and examples/
  # do; it prints one "tpx-missing: ..." line per library it does not find.
  probe=$out/deps
  rm -rf "$probe" && mkdir -p "$probe"  # nothing cached from a run with other paths
  cat >"$probe/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(tpx_gpu_check_deps LANGUAGES CXX)
list(APPEND CMAKE_MODULE_PATH "${TPX_SOURCE_DIR}/cmake")
function(need found what)
  if(NOT ${found})
    message(STATUS "tpx-missing: ${what}")
  endif()
endfunction()
find_package(CBLAS QUIET)
need(CBLAS_FOUND "OpenBLAS with cblas.h (apt: libopenblas-dev)")
find_package(nlohmann_json 3.9 CONFIG QUIET)
need(nlohmann_json_FOUND "nlohmann_json >= 3.9 (apt: nlohmann-json3-dev)")
find_package(doctest CONFIG QUIET)
need(doctest_FOUND "doctest (apt: doctest-dev)")
find_package(CLI11 CONFIG QUIET)
need(CLI11_FOUND "CLI11 (apt: libcli11-dev)")
find_package(XXHash QUIET)
need(XXHash_FOUND "libxxhash, the checkpoints' checksums (apt: libxxhash-dev)")
find_package(CUDAToolkit QUIET)
need(CUDAToolkit_FOUND "the CUDA toolkit's libraries (cudart, cuBLASLt)")
if(CUDAToolkit_FOUND)
  find_package(NCCL 2.18 QUIET)
  need(NCCL_FOUND "NCCL >= 2.18 (inside CUDA 13's toolkit; apt: libnccl-dev; pip install nvidia-nccl-cu13 or -cu12; or NCCL_ROOT=<prefix>)")
endif()
CMAKE
  if ! probe_log=$(CUDACXX=$nvcc cmake -G Ninja -S "$probe" -B "$probe/build" \
                   -DTPX_SOURCE_DIR="$PWD" 2>&1); then
    echo "$probe_log" >&2
    missing+=("a CMake configure of a C++ project that works (its output is above)")
  fi
  while IFS= read -r line; do
    missing+=("${line#*tpx-missing: }")
  done < <(grep 'tpx-missing: ' <<<"$probe_log" || true)
fi
if ((${#missing[@]})); then
  echo "gpu-check: missing, so nothing was built:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  cat >&2 <<EOF
With a package manager: bash scripts/install-deps.sh (the host tools and libraries).
Offline: unpack the packages under a prefix (dpkg -x PKG.deb PREFIX) and export
  CMAKE_PREFIX_PATH=PREFIX/usr (with CMAKE_INCLUDE_PATH and CMAKE_LIBRARY_PATH for OpenBLAS in
  a multiarch dir), and NCCL_ROOT=PREFIX for NCCL.
  Now: CMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH:-(unset)}, NCCL_ROOT=${NCCL_ROOT:-(unset)}.
EOF
  exit 1
fi
echo "all found (CMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH:-(unset)}, NCCL_ROOT=${NCCL_ROOT:-(unset)})"

export CUDACXX=$nvcc CMAKE_BUILD_PARALLEL_LEVEL=$jobs
werror=${TPX_WERROR:-OFF}
configure=(-DTPX_WERROR="$werror")
[[ -n $cuda_architectures ]] && configure+=(-DCMAKE_CUDA_ARCHITECTURES="$cuda_architectures")
bench=build/cuda/bench/cuda/tpx-bench-cuda
train=build/cuda/examples/tpx-train-cuda
gpt=build/cuda/examples/tpx-gpt-cuda
ctest_filter=()
if [[ ${TPX_GPU_PREBUILT:-0} == 1 ]]; then
  # What scripts/gpu-prepare.sh --build packed on the build machine: unpacked, and since ctest's
  # files name that machine's path, that path made a link to this checkout if it is free.
  if [[ ! -e build/cuda/CTestTestfile.cmake && -f .gpu/build.tgz ]]; then
    tar xzf .gpu/build.tgz && echo "unpacked .gpu/build.tgz into build/cuda"
    built_at=$(cat .gpu/build-root 2>/dev/null || true)
    if [[ -n $built_at && $built_at != "$PWD" && ! -e $built_at ]] &&
       mkdir -p "$(dirname "$built_at")" 2>/dev/null && ln -s "$PWD" "$built_at"; then
      echo "linked $built_at (where build/cuda was built) to $PWD, for ctest's paths"
    fi
  fi
  absent=()
  for f in "$bench" "$train" "$gpt" build/cuda/CTestTestfile.cmake; do [[ -e $f ]] || absent+=("$f"); done
  if ((${#absent[@]})); then
    summary+=("FAILED   build: TPX_GPU_PREBUILT=1 but build/cuda lacks ${absent[*]}")
    failed=1
  else
    skip "build" "TPX_GPU_PREBUILT=1: build/cuda as found, built elsewhere"
  fi
  ctest_filter=(-LE consumer)
else
  step "build (cuda preset, TPX_WERROR=$werror, GPU architectures ${cuda_architectures:-as configured})" \
    bash -c 'cmake --preset cuda "$@" >/dev/null && cmake --build --preset cuda' _ "${configure[@]}"
fi
built=$((failed == 0))

if ! wanted tests; then
  :
elif ((built)); then
  step "CUDA tests" ctest --preset cuda "${ctest_filter[@]}"
else
  skip "CUDA tests" "the build failed"
fi

if ! wanted trainer; then
  :
elif ((gpus == 0)); then
  skip "trainer" "no GPU (nvidia-smi lists none)"
elif ((!built)); then
  skip "trainer" "the build failed"
else
  mkdir -p "$out"
  step "trainer (tpx-train-cuda, 2x2 mesh on GPU 0)" \
    "$train" --mesh 2x2 --steps 100 --log-every 20 --log "$out/train.jsonl"
  step "trainer recorded as a CUDA graph (tpx-train-cuda --cuda-graph, 1x1 mesh on GPU 0)" \
    "$train" --mesh 1x1 --steps 100 --log-every 20 --cuda-graph
  step "trainer over NCCL (tpx-train-cuda --backend nccl, 1x1 mesh on GPU 0)" \
    "$train" --backend nccl --mesh 1x1 --steps 50 --log-every 10
  step "trainer as a launched process (tpx-train-cuda under torchrun's variables, world size 1)" \
    env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" \
    "$train" --mesh 1x1 --steps 50 --log-every 10
  step "trainer in pipeline stages (tpx-train-cuda --pipeline 2 --schedule zero-bubble-v, 2x1x2 on GPU 0)" \
    "$train" --pipeline 2 --schedule zero-bubble-v --microbatches 8 --mesh 1x2 --steps 50 --log-every 10
  step "GPT (tpx-gpt-cuda, 2x2 mesh on GPU 0)" \
    "$gpt" --mesh 2x2 --steps 50 --log-every 10 --log "$out/gpt.jsonl"
  step "GPT with overlap (tpx-gpt-cuda --overlap on: gathers and reduce-scatters on each rank's second stream)" \
    "$gpt" --mesh 2x2 --steps 50 --log-every 10 --overlap on --log "$out/gpt-overlap.jsonl"
  step "GPT over NCCL (tpx-gpt-cuda --backend nccl, 1x1 mesh on GPU 0, bf16)" \
    "$gpt" --backend nccl --mesh 1x1 --steps 50 --log-every 10 --bf16
  step "GPT with fused attention (tpx-gpt-cuda --fused-attention --bf16: tensor cores, 1x1)" \
    "$gpt" --mesh 1x1 --steps 50 --log-every 10 --bf16 --fused-attention --head-dim 64
fi

if ! wanted memcheck; then
  :
elif ((gpus == 0)); then
  skip "memcheck" "no GPU (nvidia-smi lists none)"
elif ! command -v compute-sanitizer >/dev/null; then
  skip "memcheck" "compute-sanitizer is not on PATH"
elif ((!built)); then
  skip "memcheck" "the build failed"
else
  for t in cuda_kernels_test cuda_nn_layers_test; do
    step "memcheck $t" compute-sanitizer --tool memcheck --error-exitcode 1 --leak-check full \
      "build/cuda/tests/cuda/$t"
  done
  # Shared-memory hazards: the block reductions and the tensor-core attention's staged tiles.
  step "racecheck cuda_kernels_test" compute-sanitizer --tool racecheck --error-exitcode 1 \
    build/cuda/tests/cuda/cuda_kernels_test
fi

if ! wanted bench; then
  :
elif ((gpus == 0)); then
  skip "benches" "no GPU (nvidia-smi lists none)"
elif ((!built)); then
  skip "benches" "the build failed"
else
  mkdir -p "$out"
  step "bench gemm" bash -o pipefail -c "$bench gemm -b 1024 -e 8192 --json $out/gemm.json | tee $out/gemm.txt"
  step "bench gelu" bash -o pipefail -c "$bench gelu --json $out/gelu.json | tee $out/gelu.txt"
  step "bench kernels" bash -o pipefail -c "$bench kernels -N 64M -d 4096 --json $out/kernels.json | tee $out/kernels.txt"
  step "bench attention" bash -o pipefail -c "$bench attention --json $out/attention.json | tee $out/attention.txt"
  step "bench attention under context parallelism (each of 4 ranks' block of T = 4096, bf16, [B, T, H, E])" \
    bash -o pipefail -c "$bench attention -B 8 -T 4096 -t bf16 --layout tokens --context-parallel 4 --json $out/attention-cp.json | tee $out/attention-cp.txt"
  step "bench attention, grouped-query (12 query heads, 4 key and value heads, bf16)" \
    bash -o pipefail -c "$bench attention -G 4 -t bf16 --json $out/attention-gqa.json | tee $out/attention-gqa.txt"
  step "bench attention tilings (the tensor-core kernels under other tilings, E = 64 and 128)" \
    bash -o pipefail -c "$bench attention-tilings -E 64,128 --json $out/attention-tilings.json | tee $out/attention-tilings.txt"
  step "bench attention tilings as the GPT lays them out ([B, T, H, E], GPT-2's T = 1024)" \
    bash -o pipefail -c "$bench attention-tilings -T 1024 --layout tokens --json $out/attention-tilings-gpt.json | tee $out/attention-tilings-gpt.txt"
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

if ! wanted peers-train && ! wanted peers-gpt && ! wanted peers-attention; then
  :
elif ((gpus == 0)); then
  skip "peers" "no GPU (nvidia-smi lists none)"
elif ! python3 -c 'import torch' 2>/dev/null; then
  skip "peers" "python3 cannot import torch"
elif ((!built)); then
  skip "peers" "the build failed"
else
  mkdir -p "$out"
  wanted peers-train && step "peers: tpx-train-cuda vs PyTorch eager and torch.compile" \
    python3 bench/peers/compare.py --gpu --tpx-cuda "$train" --json "$out/peers.json"
  wanted peers-gpt && step "peers: tpx-gpt-cuda vs PyTorch eager and torch.compile (GPT)" \
    python3 bench/peers/compare.py --gpt --gpu-steps 10 --gpu-warmup 3 --tpx-gpt-cuda "$gpt" \
      --json "$out/peers-gpt.json"
  wanted peers-attention && step "peers: fused attention kernels vs PyTorch SDPA (flash), forward and backward" \
    python3 bench/peers/compare.py --attention --tpx-bench-cuda "$bench" --json "$out/peers-attention.json"
  wanted peers-attention && step "peers: grouped-query attention kernels vs PyTorch SDPA (enable_gqa), 4 key and value heads, bf16" \
    python3 bench/peers/compare.py --attention --attention-kv-heads 4 \
      --tpx-bench-cuda "$bench" --json "$out/peers-attention-gqa.json"
fi

if ! wanted profile; then
  :
elif ((gpus == 0)); then
  skip "profile" "no GPU (nvidia-smi lists none)"
elif ((!built)); then
  skip "profile" "the build failed"
else
  mkdir -p "$out"
  # The step's own phases, timed by events on the rank's stream (--profile-phases): where no
  # profiler can read the GPU (gVisor), and beside ncu, what the step's wall time holds: the GPU
  # waiting between kernels shows here, not in a sum of kernel times.
  step "profile: phases of a GPT step (CUDA events; GPT-2 124M's shape, fused attention; profile-phases-gpt.txt)" \
    bash -o pipefail -c '"$1" "${@:3}" | tee "$2"' _ "$gpt" "$out/profile-phases-gpt.txt" \
    --fused-attention --batch 16 --seq 1024 --heads 12 --head-dim 64 --ffn 3072 --layers 12 \
    --vocab 50304 --mesh 1x1 --bf16 --steps 12 --log-every 1000 --peak-gflops 989000 \
    --log "$out/profile-phases-gpt.jsonl" --profile-phases
  # The same with one loss read-back in 12 steps: the host queues ahead of the GPU, as it does
  # between reports; the difference from the table above is what reading the loss every step costs.
  step "profile: phases of a GPT step, one read-back in 12 steps (profile-phases-gpt-queued.txt)" \
    bash -o pipefail -c '"$1" "${@:3}" | tee "$2"' _ "$gpt" "$out/profile-phases-gpt-queued.txt" \
    --fused-attention --batch 16 --seq 1024 --heads 12 --head-dim 64 --ffn 3072 --layers 12 \
    --vocab 50304 --mesh 1x1 --bf16 --steps 12 --report-every 12 --log-every 1000 --peak-gflops 989000 \
    --log "$out/profile-phases-gpt-queued.jsonl" --profile-phases
  step "profile: phases of an MLP step (CUDA events; B=8192 D=1024 F=4096 L=4; profile-phases-mlp.txt)" \
    bash -o pipefail -c '"$1" "${@:3}" | tee "$2"' _ "$train" "$out/profile-phases-mlp.txt" \
    --batch 8192 --d-model 1024 --ffn 4096 --layers 4 --context 3 --mesh 1x1 --bf16 --steps 12 \
    --log-every 1000 --peak-gflops 989000 --log "$out/profile-phases-mlp.jsonl" --profile-phases
  # PyTorch eager's step at the same shapes, marked under the same phase names
  # (bench/peers/torch_common.py's PhaseClock), and each beside tpx's, the largest gap first.
  if python3 -c 'import torch' 2>/dev/null; then
    torch_phases() {  # torch_phases TITLE NAME ARGS...: bench/peers/torch_NAME.py, then the comparison
      local title=$1 name=$2
      shift 2
      step "$title" bash -o pipefail -c '
        out=$1 name=$2
        shift 2
        python3 bench/peers/torch_$name.py --device cuda --dtype bf16 --profile-phases --steps 10 \
          --warmup 3 "$@" >"$out/profile-phases-torch-$name.txt" &&
          python3 bench/peers/phase_compare.py "$out/profile-phases-$name.jsonl" \
            "$out/profile-phases-torch-$name.txt" --json "$out/profile-phases-vs-torch-$name.json" |
          tee "$out/profile-phases-vs-torch-$name.txt"' _ "$out" "$name" "$@"
    }
    torch_phases "profile: phases of the GPT's step in PyTorch eager (torch_gpt.py; profile-phases-vs-torch-gpt.txt)" \
      gpt --batch 16 --seq 1024 --heads 12 --head-dim 64 --ffn 3072 --layers 12 --vocab 50304
    torch_phases "profile: phases of the MLP's step in PyTorch eager (torch_mlp.py; profile-phases-vs-torch-mlp.txt)" \
      mlp --batch 8192 --d-model 1024 --ffn 4096 --layers 4 --context 3
  else
    skip "profile: PyTorch's phases" "python3 cannot import torch"
  fi
  if command -v ncu >/dev/null; then
    # The peers' shapes, bf16 on a 1x1 mesh; --peak-gflops spares the GEMM peak measurement,
    # which ncu would time kernel by kernel too. Each kernel runs alone under ncu: the table is
    # the sum of kernel times, not the step's wall time (the peers part has that).
    profile_kernels() {  # profile_kernels TITLE NAME PROGRAM ARGS...: ncu's CSV, then the table
      local title=$1 name=$2
      shift 2
      step "$title" bash -o pipefail -c '
        out=$1 name=$2 steps=2
        shift 2
        ncu --csv --print-units base --clock-control none --metrics gpu__time_duration.sum \
          --log-file "$out/profile-$name.csv" "$@" --mesh 1x1 --bf16 --steps $steps \
          --log-every 1000 --peak-gflops 989000 >/dev/null &&
          python3 scripts/kernel-profile.py "$out/profile-$name.csv" --steps $steps \
            --json "$out/profile-$name.json" | tee "$out/profile-$name.txt"' _ "$out" "$name" "$@"
    }
    profile_kernels "profile: kernels of a GPT step (ncu; GPT-2 124M's shape, fused attention; profile-gpt.txt)" \
      gpt "$gpt" --fused-attention --batch 16 --seq 1024 --heads 12 --head-dim 64 --ffn 3072 \
      --layers 12 --vocab 50304
    profile_kernels "profile: kernels of an MLP step (ncu; B=8192 D=1024 F=4096 L=4; profile-mlp.txt)" \
      mlp "$train" --batch 8192 --d-model 1024 --ffn 4096 --layers 4 --context 3
  else
    skip "profile: kernels" "ncu (Nsight Compute) is not on PATH"
  fi
  if command -v nsys >/dev/null; then
    step "profile of 20 steps (nsys; memory copies in $out/profile-copies.txt)" \
      bash -o pipefail -c "nsys profile --force-overwrite true -o $out/step-profile $train --mesh 1x1 --steps 20 \
        --report-every 10 >/dev/null && nsys stats --report cuda_gpu_mem_size_sum $out/step-profile.nsys-rep \
        | tee $out/profile-copies.txt"
  else
    skip "profile: copies" "nsys (Nsight Systems) is not on PATH"
  fi
fi

# The tables' first rows (largest first), last, where a runner that keeps only the output's end
# sees them; the whole tables are in $out and its archive.
for table in profile-phases-vs-torch-gpt profile-phases-vs-torch-mlp profile-gpt profile-mlp \
             attention-tilings attention-tilings-gpt attention-cp; do
  [[ -s $out/$table.txt ]] || continue
  echo "=== $table.txt (first rows)"
  head -n 14 "$out/$table.txt"
done
if [[ -n ${TPX_GPU_CHECK_ARCHIVE:-} && -d $out ]]; then
  archive=$(realpath -m "$TPX_GPU_CHECK_ARCHIVE")
  # Packed outside the folder first, then moved in place: an archive written inside the folder
  # tar reads makes tar fail with "file changed as we read it", now and then.
  packing=$(mktemp "${TMPDIR:-/tmp}/gpu-check-archive.XXXXXX")
  if tar czf "$packing" --exclude=./deps --exclude="./${archive##*/}" -C "$out" . &&
     mv "$packing" "$archive"; then
    summary+=("packed   $out into $archive ($(du -h "$archive" | cut -f1))")
  else
    summary+=("FAILED   packing $out into $archive (TPX_GPU_CHECK_ARCHIVE)")
    rm -f "$packing"
    failed=1
  fi
fi

echo "=== summary ($gpus GPU(s))"
printf '%s\n' "${summary[@]}"
if ((built && failed)); then
  echo "some step failed: figures below come from a build that did not pass everything"
fi
wanted bench && [[ -f $out/figures.txt ]] && cat "$out/figures.txt"
exit $failed

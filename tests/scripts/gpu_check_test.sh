#!/usr/bin/env bash
# scripts/gpu-check.sh's parts and step limit, checked without a GPU, since the script runs only
# on the rare GPU it is lent and a mistake in it costs that lease. cmake's configure and build
# steps, ctest and nvidia-smi are stand-ins here (its probe of the libraries runs for real, so the
# test is skipped where the CUDA toolkit is missing): an unknown part is refused, a part not asked
# for does not run, a step that outlives TPX_GPU_STEP_SECONDS is cut off and reported as such,
# the parts that need a GPU say they were skipped for want of one, and the build compiles for
# the GPUs' architectures (nvidia-smi's compute capabilities) unless told otherwise, and a build
# made elsewhere is used as found when asked (TPX_GPU_PREBUILT=1), and the profile part asks both
# trainers for their phase tables, sums ncu's kernel times by kernel, and with torch sets PyTorch
# eager's phase tables beside tpx's.
#   bash tests/scripts/gpu_check_test.sh SOURCE_DIR
set -uo pipefail
root=$1
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || {
  echo "skipped: no nvcc, so gpu-check stops at its probe"
  exit 77
}
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
real_cmake=$(command -v cmake)
cat >"$stub/cmake" <<EOF
#!/usr/bin/env bash
case "\$1" in --preset | --build) echo "stand-in: cmake \$*" | tee -a "$stub/cmake-calls"; exit 0 ;; esac
exec "$real_cmake" "\$@"
EOF
printf '#!/usr/bin/env bash\necho "stand-in: ctest $*"; sleep 5\n' >"$stub/ctest"
printf '#!/usr/bin/env bash\nexit 1\n' >"$stub/no-gpus"
# GPUs of the compute capabilities in TPX_STUB_GPUS (e.g. "9.0 9.0"), as nvidia-smi lists them.
cat >"$stub/gpus" <<'EOF'
#!/usr/bin/env bash
i=0
for cap in $TPX_STUB_GPUS; do
  case "$*" in
    -L) echo "GPU $i: NVIDIA stand-in (UUID: GPU-$i)" ;;
    *compute_cap*) echo "$cap" ;;
  esac
  i=$((i + 1))
done
EOF
chmod +x "$stub"/*
cp "$stub/no-gpus" "$stub/nvidia-smi"

failures=0
check() {  # check WHAT CONDITION...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
gpu_check() {
  (cd "$root" && PATH="$stub:$PATH" TPX_GPU_CHECK_OUT="$stub/out" bash scripts/gpu-check.sh "$@" 2>&1)
}

out=$(gpu_check bogus)
check "an unknown part exits with 2" test $? -eq 2
check "an unknown part is named with the parts there are" \
  grep -q "unknown part 'bogus'; the parts are: tests memcheck trainer" <<<"$out"

out=$(TPX_GPU_STEP_SECONDS=1 gpu_check tests)
check "a step cut off fails the run" test $? -eq 1
check "a step cut off says so" \
  grep -q "FAILED   CUDA tests (cut off after its 1 s: TPX_GPU_STEP_SECONDS)" <<<"$out"
check "the build runs first" grep -q "^passed   build (cuda preset" <<<"$out"
check "parts not asked for do not run" bash -c '! grep -Eq "trainer|peers|memcheck|bench" <<<"$1"' _ "$out"

out=$(gpu_check peers trainer)
check "parts that need a GPU pass as skipped without one" test $? -eq 0
check "the trainer part is skipped without a GPU" grep -q "^skipped  trainer: no GPU" <<<"$out"
check "the peers part is skipped without a GPU" grep -q "^skipped  peers: no GPU" <<<"$out"
check "the tests part does not run when not asked for" bash -c '! grep -q "CUDA tests" <<<"$1"' _ "$out"

# The architectures the build compiles for: the GPUs', an override, or the project's default.
configured() {  # configured "CAPABILITIES" [VAR=VALUE...]: the cuda preset's configure line
  rm -f "$stub/cmake-calls"
  [[ -n $1 ]] && cp "$stub/gpus" "$stub/nvidia-smi"
  (export TPX_STUB_GPUS="$1" "${@:2}"; TPX_GPU_STEP_SECONDS=1 gpu_check tests >/dev/null)
  cp "$stub/no-gpus" "$stub/nvidia-smi"
  grep -- "--preset cuda" "$stub/cmake-calls"
}
line=$(configured "9.0 9.0")
check "two H100s: the build compiles for 90 alone" \
  grep -q -- "-DCMAKE_CUDA_ARCHITECTURES=90$" <<<"$line"
line=$(configured "8.0 9.0")
check "an A100 and an H100: for both" grep -q -- "-DCMAKE_CUDA_ARCHITECTURES=80;90$" <<<"$line"
line=$(configured "9.0" TPX_CUDA_ARCHITECTURES=100)
check "TPX_CUDA_ARCHITECTURES overrides the GPUs'" \
  grep -q -- "-DCMAKE_CUDA_ARCHITECTURES=100$" <<<"$line"
line=$(configured "")
check "no GPU: the project's default" bash -c '[[ -n $1 && $1 != *ARCHITECTURES* ]]' _ "$line"

# A build made elsewhere (TPX_GPU_PREBUILT=1) is used as found, in a copy of the scripts with a
# build/cuda of its own: nothing is built, and ctest leaves out the consumer builds.
copy=$stub/copy
mkdir -p "$copy/scripts" && cp "$root/scripts/gpu-check.sh" "$copy/scripts/" && cp -r "$root/cmake" "$copy/"
prebuilt() { (cd "$copy" && PATH="$stub:$PATH" TPX_GPU_PREBUILT=1 TPX_GPU_CHECK_OUT="$stub/out" \
                bash scripts/gpu-check.sh tests 2>&1); }
fake_build() {  # fake_build DIR: the files of a build/cuda that gpu-check looks for, under DIR
  mkdir -p "$1/build/cuda/bench/cuda" "$1/build/cuda/examples"
  touch "$1/build/cuda/"{bench/cuda/tpx-bench-cuda,CTestTestfile.cmake}
  local program
  for program in tpx-train-cuda tpx-gpt-cuda; do  # stand-ins that say how they were called
    # and, asked for --log, end it with a step's phases: 10 ms, attention 6 and block weights 1
    cat >"$1/build/cuda/examples/$program" <<EOF
#!/usr/bin/env bash
echo "stand-in: $program \$*"
while ((\$#)); do [[ \$1 == --log ]] && log=\$2; shift; done
[[ -z \${log:-} ]] || echo '{"step": 11, "phase_steps": 11, "phase_ms_per_step": 10.0, "phases": [{"name": "attention", "ms_per_step": 6.0, "marks_per_step": 12.0}, {"name": "block weights", "ms_per_step": 1.0, "marks_per_step": 24.0}, {"name": "AdamW", "ms_per_step": 1.0, "marks_per_step": 1.0}]}' >"\$log"
EOF
    chmod +x "$1/build/cuda/examples/$program"
  done
}
rm -f "$stub/cmake-calls"
out=$(prebuilt)
check "prebuilt without a build fails" test $? -eq 1
check "prebuilt without a build names what is missing" \
  grep -q "FAILED   build: TPX_GPU_PREBUILT=1 but build/cuda lacks build/cuda/bench/cuda/tpx-bench-cuda" <<<"$out"
fake_build "$copy"
out=$(prebuilt)
check "prebuilt with a build passes" test $? -eq 0
check "prebuilt: the build is skipped" grep -q "^skipped  build: TPX_GPU_PREBUILT=1" <<<"$out"
check "prebuilt: nothing is configured or built" test ! -e "$stub/cmake-calls"
check "prebuilt: the tests leave out the consumer builds" \
  grep -q "stand-in: ctest --preset cuda -LE consumer" <<<"$out"

# The same from what gpu-prepare.sh --build packed elsewhere: unpacked, and the build machine's
# path (ctest's files name it) linked to the checkout.
rm -rf "$copy/build"
packed=$stub/packed
fake_build "$packed"
mkdir -p "$copy/.gpu"
tar czf "$copy/.gpu/build.tgz" -C "$packed" build
echo "$stub/elsewhere/main" >"$copy/.gpu/build-root"
out=$(prebuilt)
check "prebuilt from .gpu/build.tgz passes" test $? -eq 0
check "prebuilt from .gpu/build.tgz unpacks it" test -e "$copy/build/cuda/examples/tpx-gpt-cuda"
check "prebuilt from .gpu/build.tgz links the build machine's path to the checkout" \
  test "$(readlink "$stub/elsewhere/main")" = "$copy"

# The profile part: ncu's CSV, summed kernel by kernel per step. A stand-in ncu writes what ncu
# --csv --print-units base writes for three launches: a GEMM of 2.5 ms and the attention kernel
# twice, 1 ms and 0.5 ms; the two steps asked for then take 2 ms each, 62.5 % of it the GEMM.
cat >"$stub/ncu" <<'EOF'
#!/usr/bin/env bash
while [[ $1 != --log-file ]]; do shift; done
metric='"Command line profiler metrics","gpu__time_duration.sum","nsecond"'
cat >"$2" <<CSV
==PROF== Connected to process 1 (/stand-in)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","p","h","void tpx::flash_forward_kernel<64>(tpx::arguments)","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0",$metric,"1,000,000"
"1","1","p","h","sm90_xmma_gemm_bf16","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0",$metric,"2,500,000"
"2","1","p","h","void tpx::flash_forward_kernel<64>(tpx::arguments)","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0",$metric,"500,000"
CSV
EOF
chmod +x "$stub/ncu"
# python3 with a stand-in torch (TPX_STUB_TORCH=1) or none: the PyTorch peers say how they were
# called and end with an eager step's phases, 4 ms, attention 2 and AdamW 1.5; all else is python3.
cat >"$stub/python3" <<EOF
#!/usr/bin/env bash
if [[ \$1 == -c && \$2 == "import torch" ]]; then [[ \${TPX_STUB_TORCH:-0} == 1 ]]; exit; fi
case \$1 in
  */torch_gpt.py | */torch_mlp.py)
    echo "stand-in: \$*"
    echo '{"bench": "torch_gpt", "compile": false, "dtype": "bf16", "phase_steps": 10, "phase_ms_per_step": 4.0, "phases": [{"name": "attention", "ms_per_step": 2.0, "marks_per_step": 12.0}, {"name": "AdamW", "ms_per_step": 1.5, "marks_per_step": 1.0}]}'
    exit 0 ;;
esac
exec "$(command -v python3)" "\$@"
EOF
chmod +x "$stub/python3"
cp "$stub/gpus" "$stub/nvidia-smi"
cp "$root/scripts/kernel-profile.py" "$copy/scripts/"
mkdir -p "$copy/bench/peers" && cp "$root/bench/peers/phase_compare.py" "$copy/bench/peers/"
profile() { (cd "$copy" && PATH="$stub:$PATH" TPX_STUB_GPUS=9.0 TPX_GPU_PREBUILT=1 \
               TPX_GPU_CHECK_OUT="$stub/out" bash scripts/gpu-check.sh profile 2>&1); }
out=$(profile)
check "profile with ncu passes" test $? -eq 0
check "profile: the GPT's and the MLP's kernels are profiled" \
  test "$(grep -c "^passed   profile: kernels of a" <<<"$out")" -eq 2
check "profile: the GEMM first, 62.5 % of the time, 1.25 ms and half a launch per step" \
  grep -Eq "^ 62\.5% +1\.250 +0\.5 +2500\.0  sm90_xmma_gemm_bf16$" "$stub/out/profile-gpt.txt"
check "profile: the attention kernel's two launches grouped under its name" \
  grep -Eq "^ 37\.5% +0\.750 +1 +750\.0  tpx::flash_forward_kernel<64>$" "$stub/out/profile-gpt.txt"
check "profile: the total per step" grep -Eq "^100\.0% +2\.000 +1\.5 " "$stub/out/profile-mlp.txt"
check "profile: the three phase tables (GPT twice, MLP) are asked for" \
  test "$(grep -c "^passed   profile: phases of a" <<<"$out")" -eq 3
check "profile: the GPT's phases at GPT-2's shape, after its warm-up step" \
  grep -q "^stand-in: tpx-gpt-cuda --fused-attention --batch 16 --seq 1024 .* --steps 12 .*--log .*/profile-phases-gpt.jsonl --profile-phases$" \
  "$stub/out/profile-phases-gpt.txt"
check "profile: the GPT's phases again, reading the loss back once in its 12 steps" \
  grep -q "^stand-in: tpx-gpt-cuda .* --steps 12 --report-every 12 .*--log .*/profile-phases-gpt-queued.jsonl --profile-phases$" \
  "$stub/out/profile-phases-gpt-queued.txt"
check "profile: the MLP's phases at the peer's shape" \
  grep -q "^stand-in: tpx-train-cuda --batch 8192 --d-model 1024 .*--log .*/profile-phases-mlp.jsonl --profile-phases$" \
  "$stub/out/profile-phases-mlp.txt"
check "profile: without nsys, the copies are skipped, saying why" \
  grep -q "^skipped  profile: copies: nsys (Nsight Systems) is not on PATH" <<<"$out"
check "profile: without torch, PyTorch's phases are skipped, saying why" \
  grep -q "^skipped  profile: PyTorch's phases: python3 cannot import torch" <<<"$out"

# With torch, PyTorch eager's phases at tpx's shapes, and each table beside tpx's.
out=$(TPX_STUB_TORCH=1 profile)
check "profile with torch passes" test $? -eq 0
check "profile: PyTorch's GPT and MLP phases are asked for and compared" \
  test "$(grep -c "^passed   profile: phases of the .* step in PyTorch eager" <<<"$out")" -eq 2
check "profile: PyTorch's GPT step at GPT-2's shape, bf16, eager, marked" \
  grep -q "^stand-in: bench/peers/torch_gpt.py --device cuda --dtype bf16 --profile-phases .*--batch 16 --seq 1024 --heads 12 --head-dim 64 --ffn 3072 --layers 12 --vocab 50304$" \
  "$stub/out/profile-phases-torch-gpt.txt"
check "profile: PyTorch's steps are eager (phases cannot be marked in a compiled step)" \
  bash -c '! grep -q -- "--compile" "$1"/profile-phases-torch-{gpt,mlp}.txt' _ "$stub/out"
check "profile: PyTorch's MLP step at tpx's MLP shape" \
  grep -q "^stand-in: bench/peers/torch_mlp.py --device cuda --dtype bf16 --profile-phases .*--batch 8192 --d-model 1024 --ffn 4096 --layers 4 --context 3$" \
  "$stub/out/profile-phases-torch-mlp.txt"
table=$stub/out/profile-phases-vs-torch-gpt.txt
check "profile: the largest difference first: attention, 6 ms against 2" \
  grep -Eq "^  attention +6\.000 +2\.000 +\+4\.000$" <(sed -n 3p "$table")
check "profile: time in no phase compared too (2 ms against 0.5)" \
  grep -Eq "^  \(in no phase\) +2\.000 +0\.500 +\+1\.500$" <(sed -n 4p "$table")
check "profile: a phase only tpx marks counts whole" \
  grep -Eq "^  block weights +1\.000 +- +\+1\.000$" <(sed -n 5p "$table")
check "profile: a phase PyTorch takes longer in comes last" \
  grep -Eq "^  AdamW +1\.000 +1\.500 +-0\.500$" <(sed -n 6p "$table")
check "profile: the steps' times and their difference" \
  grep -Eq "^  step +10\.000 +4\.000 +\+6\.000$" "$table"
check "profile: the MLP's table too" test -s "$stub/out/profile-phases-vs-torch-mlp.txt"
check "profile: the summary closes with the tables' first rows" \
  grep -q "^=== profile-phases-vs-torch-gpt.txt (first rows)" <<<"$out"

# TPX_GPU_CHECK_ARCHIVE: the output folder packed into one file (for a runner that brings back
# a few files only), the probe's scratch left out; an archive asked for inside the folder is
# not packed into itself.
out=$(TPX_STUB_TORCH=1 TPX_GPU_CHECK_ARCHIVE="$stub/bundle.tgz" profile)
check "profile with an archive passes" test $? -eq 0
check "the archive is reported in the summary" grep -q "^packed   .* into $stub/bundle.tgz" <<<"$out"
listing=$(tar tzf "$stub/bundle.tgz")
check "the archive holds the tables" \
  bash -c 'grep -qx "./profile-gpt.txt" <<<"$1" && grep -qx "./profile-phases-vs-torch-gpt.txt" <<<"$1"' _ "$listing"
check "the archive leaves out the probe's scratch" bash -c '! grep -q "^./deps" <<<"$1"' _ "$listing"
out=$(TPX_GPU_CHECK_ARCHIVE="$stub/out/inside.tgz" profile)
check "an archive inside the output folder passes" test $? -eq 0
check "an archive inside the output folder is not packed into itself" \
  bash -c '! tar tzf "$1" | grep -q inside.tgz' _ "$stub/out/inside.tgz"
cp "$stub/no-gpus" "$stub/nvidia-smi"

((failures == 0)) || { echo "$failures check(s) failed; gpu-check's last output:"; echo "$out"; }
exit $((failures > 0))

#!/usr/bin/env bash
# Installs what building and testing tpx needs on Debian 12 / Ubuntu 24.04 or newer: the compiler,
# CMake, Ninja (the presets) and make (a plain `cmake -B build`, CI's release stage), OpenBLAS,
# doctest, nlohmann-json, libxxhash (the checkpoints' checksums), CLI11, ccache, gnuplot, python3
# (for the plots), OpenMPI (the MPI backend and its tests under mpirun) and a clang >= 16 (CI's
# clang and fuzz stages). Only the packages missing are installed (checked with dpkg-query first),
# so a second run, or a run on a machine that has everything, returns at once without touching
# apt. Uses sudo when not run as root. CUDA (nvcc) is not installed here: it is optional.
#
# --slurm (.ci/run passes it) also installs Slurm's daemons and munge, for slurm_program_test,
# which starts a private one-node cluster (tests/scripts/with_private_slurm.sh), but not where
# systemd runs: there the packages would enable services of their own (slurmd's fails without a
# slurm.conf), so a workstation keeps its system as it is and the test says it is skipped.
set -euo pipefail

packages=(cmake ninja-build make g++ doctest-dev libopenblas-dev nlohmann-json3-dev libxxhash-dev
          libcli11-dev ccache gnuplot-nox python3 libopenmpi-dev openmpi-bin)

if [[ ${1-} == --slurm ]]; then
  if [[ -d /run/systemd/system ]]; then
    echo "install-deps: --slurm: systemd runs here, so Slurm is not installed (its packages" \
         "would start services); slurm_program_test runs where Slurm already is, else skips"
  else
    packages+=(slurmctld slurmd slurm-client munge)
  fi
elif (($#)); then
  echo "usage: $0 [--slurm]" >&2
  exit 2
fi

# clang >= 16 for CI's clang stage (tpx's diagnostics under clang), where apt has one, with its
# runtime libraries (libFuzzer and the sanitizers: CI's fuzz stage), only recommended by clang.
for v in 19 18 17 16; do
  if apt-cache show "clang-$v" >/dev/null 2>&1; then
    packages+=("clang-$v")
    apt-cache show "libclang-rt-$v-dev" >/dev/null 2>&1 && packages+=("libclang-rt-$v-dev")
    break
  fi
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The presets (CMakePresets.json, version 6) need CMake 3.25; Ubuntu 22.04's apt has 3.22.
cmake_version=$(cmake --version | awk 'NR == 1 { print $3 }')
if ! printf '3.25\n%s\n' "$cmake_version" | sort -V -C; then
  echo "install-deps: CMake $cmake_version is too old, tpx needs 3.25 (e.g. pip install 'cmake>=3.25')" >&2
  exit 1
fi

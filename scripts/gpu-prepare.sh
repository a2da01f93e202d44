#!/usr/bin/env bash
# Prepares, on a machine that reaches Debian's package archive, what scripts/gpu-check.sh needs on
# a GPU machine that reaches none (a bare CUDA image, a compute node without apt):
#
#   bash scripts/gpu-prepare.sh          # here: .gpu/debs, .gpu/setup.sh, .gpu/ kept out of git
#   source .gpu/setup.sh && bash scripts/gpu-check.sh tests trainer     # there, from the root
#
#   bash scripts/gpu-prepare.sh --build  # also the programs and tests of build/cuda, built here
#   source .gpu/setup.sh && TPX_GPU_PREBUILT=1 bash scripts/gpu-check.sh  # there: nothing to build
#
# --build packs build/cuda's executables (tests, benches, example programs; debug info stripped)
# and its ctest files into .gpu/build.tgz, and this checkout's path into .gpu/build-root, for a
# GPU whose minutes should go to running, not to nvcc (build for its architecture: configure the
# cuda preset with -DCMAKE_CUDA_ARCHITECTURES=90 for Hopper). gpu-check unpacks them there.
#
# It downloads (installs nothing) the Debian packages of every library the build finds with
# find_package and such an image lacks: OpenBLAS (with its gfortran and quadmath), doctest,
# nlohmann-json, CLI11 and libxxhash, the checkpoints' checksums; gpu-check's own probe lists the
# same libraries. The unpacking script is the team's ../shared/gpu/setup.sh (it unpacks every
# .deb of .gpu/debs under /opt/deps and points CMake, the compiler, the loader and NCCL at them),
# copied beside them. The folder is listed in .git/info/exclude, so that it travels with the
# working tree only when asked for (a remote runner's carry) and is never committed.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=.gpu
with_build=0
for a in "$@"; do
  case $a in
    --build) with_build=1 ;;
    *) echo "gpu-prepare: unknown argument '$a' (--build: also pack build/cuda)" >&2; exit 2 ;;
  esac
done
packages=(libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5
          libquadmath0 doctest-dev nlohmann-json3-dev libcli11-dev libxxhash-dev libxxhash0)

command -v apt-get >/dev/null || { echo "gpu-prepare: needs apt-get (Debian or Ubuntu)" >&2; exit 1; }
mkdir -p "$dir/debs"
rm -f "$dir"/debs/*.deb
if ! (cd "$dir/debs" && apt-get download "${packages[@]}" >/dev/null); then
  echo "gpu-prepare: apt-get download failed; run 'apt-get update' first (as root)" >&2
  exit 1
fi
setup=../shared/gpu/setup.sh
if [[ -f $setup ]]; then
  cp "$setup" "$dir/setup.sh"
else
  echo "gpu-prepare: no $setup beside the project: unpack .gpu/debs there yourself (dpkg -x" \
       "PKG.deb PREFIX) and set CMAKE_PREFIX_PATH=PREFIX/usr, as gpu-check's header says" >&2
fi
exclude=$(git rev-parse --git-path info/exclude)
grep -qxF "/$dir/" "$exclude" 2>/dev/null || echo "/$dir/" >>"$exclude"
if ((with_build)); then
  [[ -f build/cuda/CTestTestfile.cmake ]] || {
    echo "gpu-prepare: --build needs a built build/cuda (cmake --preset cuda" \
         "-DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build --preset cuda)" >&2
    exit 1
  }
  staging=$(mktemp -d)
  trap 'rm -rf "$staging"' EXIT
  mkdir -p "$staging/build/cuda"
  (cd build/cuda && { find . -name CTestTestfile.cmake
                      find tests bench examples -maxdepth 2 -type f -executable ! -path '*/CMakeFiles/*'
                    } | tar cf - -T -) | tar xf - -C "$staging/build/cuda"
  find "$staging/build/cuda" -type f -executable -exec strip --strip-debug {} + 2>/dev/null || true
  tar czf "$dir/build.tgz" -C "$staging" build
  pwd >"$dir/build-root"
  echo "gpu-prepare: build/cuda's programs and tests in $dir/build.tgz ($(du -h "$dir/build.tgz" | cut -f1))"
fi
echo "gpu-prepare: $(find "$dir/debs" -name '*.deb' | wc -l) packages in $dir/debs ($(du -sh "$dir" | cut -f1))"

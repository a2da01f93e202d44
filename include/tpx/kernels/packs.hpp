// What the block programs of kernels/ and the CUDA kernels share about memory and warps: the
// warp's width, and packs of W consecutive elements read or written as one aligned access (the
// 16-byte vectors of llm.c's Packed128 that memory-bound kernels move). On the GPU a pack is one
// load or store instruction; on the host, where the tests run the block programs on an emulated
// block (tests/support/simt_block.hpp), it is copied element by element.
#pragma once

#include "tpx/core/config.hpp"

namespace tpx::kernels {

// Threads in a warp.
inline constexpr int warp_lanes = 32;

// W consecutive elements of T, aligned to their size.
template <class T, int W>
struct alignas(sizeof(T) * W) pack {
  T v[W];
};

// The W elements at p (aligned to the pack on the GPU).
template <int W, class T>
TPX_HOST_DEVICE inline pack<T, W> load(const T* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const pack<T, W>*>(p);
#else
  pack<T, W> loaded;
  for (int j = 0; j < W; ++j) loaded.v[j] = p[j];
  return loaded;
#endif
}

template <int W, class T>
TPX_HOST_DEVICE inline void store(T* p, const pack<T, W>& values) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<pack<T, W>*>(p) = values;
#else
  for (int j = 0; j < W; ++j) p[j] = values.v[j];
#endif
}

}  // namespace tpx::kernels

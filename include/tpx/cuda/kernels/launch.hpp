// What every tpx CUDA kernel shares: the block size its __launch_bounds__ promise, the grids of
// grid-stride loops, and the 16-byte vectors of llm.c's Packed128 that memory-bound kernels load
// and store when every pointer allows it.
//
// Kernels take a grid no larger than a few waves of the device and loop over their range with a
// grid stride, so one launch serves any n (including n beyond 2^31). vec<T, W> is W elements
// read or written as one aligned access of sizeof(T) * W bytes; common_width<T...> is the W that
// makes the widest of the types 16 bytes (4 for fp32, 8 for bf16 alone). Each kernel is
// instantiated twice, with that W and with 1, and the launcher picks the first when every
// pointer (and, for rows, the row length) allows it.
#pragma once

#if !defined(__CUDACC__)
#error "tpx/cuda/kernels/ launches CUDA kernels: include it from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "tpx/kernels/packs.hpp"

namespace tpx::cuda {

// Threads per block of every tpx kernel (their __launch_bounds__).
inline constexpr int block_threads = 256;

// Blocks for a grid-stride loop over `work` items: enough to fill the largest parts (132 SMs)
// many times over, never more than the work needs, at least one.
inline unsigned grid_for(std::int64_t work) {
  constexpr std::int64_t max_blocks = 132 * 32;
  const std::int64_t blocks = (work + block_threads - 1) / block_threads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, max_blocks));
}

// Blocks for a kernel that gives each row to one block (grid-stride over the rows).
inline unsigned row_blocks(std::int64_t rows) { return static_cast<unsigned>(std::clamp<std::int64_t>(rows, 1, 65535)); }

// W elements of T as one aligned access (kernels/packs.hpp).
template <class T, int W>
using vec = kernels::pack<T, W>;

template <class... T>
inline constexpr int common_width = static_cast<int>(16 / std::max({sizeof(T)...}));

inline bool aligned_to(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// Whether every pointer is aligned to its vector of common_width<T...> elements.
template <class... T>
bool vectors_fit(const T*... p) {
  constexpr int W = common_width<T...>;
  return W > 1 && (aligned_to(p, sizeof(T) * W) && ...);
}

// The same for arrays of rows of d elements: every row must start aligned too.
template <class... T>
bool row_vectors_fit(std::int64_t d, const T*... p) {
  return d % common_width<T...> == 0 && vectors_fit(p...);
}

// W elements of p from index i (a multiple of W; p aligned to the vector) widened to fp32, and
// back: how the row kernels read and write their rows.
template <int W, class T>
__device__ inline void load_floats(const T* p, std::int64_t i, float (&out)[W]) {
  const vec<T, W> v = *reinterpret_cast<const vec<T, W>*>(p + i);
#pragma unroll
  for (int j = 0; j < W; ++j) out[j] = static_cast<float>(v.v[j]);
}
template <int W, class T>
__device__ inline void store_floats(T* p, std::int64_t i, const float (&in)[W]) {
  vec<T, W> v;
#pragma unroll
  for (int j = 0; j < W; ++j) v.v[j] = static_cast<T>(in[j]);
  *reinterpret_cast<vec<T, W>*>(p + i) = v;
}

// The index of this thread in a grid-stride loop, and the stride.
__device__ inline std::int64_t global_thread() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

}  // namespace tpx::cuda

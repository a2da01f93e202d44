// Fused causal attention on the device: the kernels behind device_space::fused_attention_forward
// and _backward (nn/fused_attention.hpp), running kernels/fused_attention.hpp's row math, the
// very functions the host loops run (tensor/host_fused_attention.hpp), on tiles staged in
// shared memory.
//
//   forward   one thread per query row, a block per tile of fused_attention_tile rows of one
//             sequence; the block walks the key tiles its rows can see, staging K and V
//   dq        the same over K and V, with dout, lse and delta per row
//   dk, dv    one thread per key row; the block walks the query tiles that see its rows (t >= s),
//             staging the scaled queries (fp32), dout, lse and delta
// The arrays are in a kernels::attention_shape's layouts, q's side and k's: [sequences, T, E], or
// [B, T, H, E] read in place; a rank's block of each sequence's queries (context parallelism)
// sees the keys up to its own positions, shape.first on. Grouped-query attention: query
// sequence b reads key sequence b / shape.group, and a key row's thread sums over the queries
// of its group's sequences, one after another.
// Each row's state (its scaled query and an accumulator of E floats) stays with its thread, the
// head width E at most kernels::fused_attention_max_head, instantiated for E up to 32, 64 and
// 128. Every output element is written by one thread, so results do not depend on scheduling.
//
// These kernels run on CUDA cores in fp32 whatever the element type: one thread per row keeps
// the causal mask and the online softmax simple and shared with the host. bf16 attention with
// heads of width 32, 64 or 128 on an sm_80+ device takes the tensor-core kernels instead
// (flash_attention.hpp, FlashAttention-2's warp split; whole sequences and blocks of queries
// alike); these remain for fp32, other widths and older devices.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/kernels/flash_attention.hpp"
#include "tpx/kernels/fused_attention.hpp"

namespace tpx::cuda {

namespace detail {

constexpr int attention_rows = kernels::fused_attention_tile;  // threads, and rows of a tile

__device__ inline std::int64_t least(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

// Rows [first, first + n) of a sequence whose row t starts at src + t * stride into shared
// memory at pitch e, as U times factor.
template <class U, class T>
__device__ void stage_rows(const T* src, std::int64_t stride, std::int64_t first, int n, int e,
                           float factor, U* dst) {
  for (int i = threadIdx.x; i < n * e; i += blockDim.x)
    dst[i] = static_cast<U>(factor * static_cast<float>(src[(first + i / e) * stride + i % e]));
}

// The key tiles that query rows [first, first + attention_rows) of a sequence see, each staged
// into k_tile and v_tile by the whole block; visit(n) runs on each thread whose row (first +
// threadIdx.x) sees n > 0 keys of the tile, k and v pointing at the sequence's first key row, its
// rows `stride` elements apart.
template <class T, class Visit>
__device__ void over_key_tiles(const kernels::attention_shape& shape, const T* k, const T* v,
                               std::int64_t stride, std::int64_t first, int e, T* k_tile, T* v_tile,
                               const Visit& visit) {
  const std::int64_t t = first + threadIdx.x, t_len = shape.queries.t_len;
  const std::int64_t last = shape.last_visible(least(first + attention_rows, t_len) - 1);
  const std::int64_t sees = shape.last_visible(t);  // this thread's last key
  for (std::int64_t s0 = 0; s0 <= last; s0 += attention_rows) {
    const int staged = static_cast<int>(least(attention_rows, last + 1 - s0));
    stage_rows(k, stride, s0, staged, e, 1.0f, k_tile);
    stage_rows(v, stride, s0, staged, e, 1.0f, v_tile);
    __syncthreads();
    if (t < t_len && s0 <= sees) visit(static_cast<int>(least(staged, sees + 1 - s0)));
    __syncthreads();
  }
}

template <int MaxE, class T>
__global__ void __launch_bounds__(attention_rows)
    fused_attention_forward_kernel(kernels::attention_shape shape, int e, float scale, const T* q,
                                   const T* k, const T* v, T* out, float* lse) {
  extern __shared__ unsigned char staging[];
  T* k_tile = reinterpret_cast<T*>(staging);
  T* v_tile = k_tile + attention_rows * e;
  const std::int64_t step = shape.queries.row_step();
  const std::int64_t base = shape.queries.row_of(blockIdx.y, 0);  // this sequence's first query
  const std::int64_t keys = shape.keys.row_of(shape.key_sequence(blockIdx.y), 0);  // first key
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * attention_rows;
  const std::int64_t t = first + threadIdx.x;
  const bool active = t < shape.queries.t_len;
  float qs[MaxE], acc[MaxE];
  kernels::attention_row_state state;
  if (active) {
    kernels::load_row(q + (base + t * step) * e, e, scale, qs);
    for (int i = 0; i < e; ++i) acc[i] = 0;
  }
  over_key_tiles(shape, k + keys * e, v + keys * e, shape.keys.row_step() * e, first, e, k_tile,
                 v_tile,
                 [&](int n) { kernels::attend_tile(qs, k_tile, v_tile, e, n, e, state, acc); });
  if (active)
    lse[base + t * step] = kernels::finish_row(state, acc, e, out + (base + t * step) * e);
}

template <int MaxE, class T>
__global__ void __launch_bounds__(attention_rows)
    fused_attention_dq_kernel(kernels::attention_shape shape, int e, float scale, const T* q,
                              const T* k, const T* v, const T* dout, const float* lse,
                              const float* delta, T* dq) {
  extern __shared__ unsigned char staging[];
  T* k_tile = reinterpret_cast<T*>(staging);
  T* v_tile = k_tile + attention_rows * e;
  const std::int64_t step = shape.queries.row_step();
  const std::int64_t base = shape.queries.row_of(blockIdx.y, 0);
  const std::int64_t keys = shape.keys.row_of(shape.key_sequence(blockIdx.y), 0);
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * attention_rows;
  const std::int64_t t = first + threadIdx.x;
  const bool active = t < shape.queries.t_len;
  float qs[MaxE], d[MaxE], grad[MaxE];
  if (active) {
    kernels::load_row(q + (base + t * step) * e, e, scale, qs);
    kernels::load_row(dout + (base + t * step) * e, e, 1.0f, d);
    for (int i = 0; i < e; ++i) grad[i] = 0;
  }
  over_key_tiles(shape, k + keys * e, v + keys * e, shape.keys.row_step() * e, first, e, k_tile,
                 v_tile, [&](int n) {
                   kernels::dq_tile(qs, d, lse[base + t * step], delta[base + t * step], k_tile,
                                    v_tile, e, n, e, scale, grad);
                 });
  if (active)
    for (int i = 0; i < e; ++i) dq[(base + t * step) * e + i] = static_cast<T>(grad[i]);
}

// A block per tile of key rows of key sequence blockIdx.y, over the query sequences of its group
// in turn; the query tiles that see them start at the first query that sees the tile's first key
// (keys past the block of queries' last position are seen by none: 0).
template <int MaxE, class T>
__global__ void __launch_bounds__(attention_rows)
    fused_attention_dkdv_kernel(kernels::attention_shape shape, int e, float scale, const T* q,
                                const T* k, const T* v, const T* dout, const float* lse,
                                const float* delta, T* dk, T* dv) {
  extern __shared__ unsigned char staging[];
  float* qs_tile = reinterpret_cast<float*>(staging);
  float* lse_tile = qs_tile + attention_rows * e;
  float* delta_tile = lse_tile + attention_rows;
  T* dout_tile = reinterpret_cast<T*>(delta_tile + attention_rows);
  const std::int64_t t_len = shape.queries.t_len, q_step = shape.queries.row_step();
  const std::int64_t k_step = shape.keys.row_step();
  const std::int64_t keys = shape.keys.row_of(blockIdx.y, 0);
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * attention_rows;
  const std::int64_t s = first + threadIdx.x;
  const bool active = s < shape.keys.t_len;
  float kf[MaxE], vf[MaxE], gk[MaxE], gv[MaxE];
  if (active) {
    kernels::load_row(k + (keys + s * k_step) * e, e, 1.0f, kf);
    kernels::load_row(v + (keys + s * k_step) * e, e, 1.0f, vf);
  }
  for (int i = 0; i < e; ++i) gk[i] = gv[i] = 0;
  for (std::int64_t member = 0; member < shape.group; ++member) {
    const std::int64_t base = shape.queries.row_of(blockIdx.y * shape.group + member, 0);
    for (std::int64_t t0 = shape.first_seeing(first); t0 < t_len; t0 += attention_rows) {
      const int staged = static_cast<int>(least(attention_rows, t_len - t0));
      stage_rows(q + base * e, q_step * e, t0, staged, e, scale, qs_tile);
      stage_rows(dout + base * e, q_step * e, t0, staged, e, 1.0f, dout_tile);
      for (int j = threadIdx.x; j < staged; j += blockDim.x) {
        lse_tile[j] = lse[base + (t0 + j) * q_step];
        delta_tile[j] = delta[base + (t0 + j) * q_step];
      }
      __syncthreads();
      if (active) {
        const std::int64_t unseen = shape.first_seeing(s) - t0;  // queries before key s's position
        const int skip = static_cast<int>(unseen > 0 ? unseen : 0);
        if (skip < staged)
          kernels::dkdv_tile(kf, vf, qs_tile + skip * e, dout_tile + skip * e, lse_tile + skip,
                             delta_tile + skip, e, staged - skip, e, gk, gv);
      }
      __syncthreads();
    }
  }
  if (active)
    for (int i = 0; i < e; ++i) {
      dk[(keys + s * k_step) * e + i] = static_cast<T>(gk[i]);
      dv[(keys + s * k_step) * e + i] = static_cast<T>(gv[i]);
    }
}

// Calls launch.template operator()<MaxE>() with the smallest instantiated MaxE >= e.
template <class Launch>
void with_head_capacity(int e, const Launch& launch) {
  if (e <= 32)
    launch.template operator()<32>();
  else if (e <= 64)
    launch.template operator()<64>();
  else
    launch.template operator()<kernels::fused_attention_max_head>();
}

inline dim3 attention_grid(std::int64_t sequences, std::int64_t rows) {
  if (sequences > 65535)  // gridDim.y
    throw std::invalid_argument("tpx: fused attention over " + std::to_string(sequences) +
                                " sequences (batch x heads) on one rank; the kernels take 65535");
  return dim3(static_cast<unsigned>((rows + attention_rows - 1) / attention_rows),
              static_cast<unsigned>(sequences));
}

}  // namespace detail

// The tensor-core kernels take bf16 attention, whole sequences and blocks of queries alike, where
// flash_attention_applies and flash_attention_addresses; the rest takes the kernels above.
template <class T>
void fused_attention_forward(cudaStream_t stream, std::int64_t sequences,
                             kernels::attention_shape shape, int e, float scale, const T* q,
                             const T* k, const T* v, T* out, float* lse) {
  if (sequences <= 0 || shape.queries.t_len <= 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    if (flash_attention_applies(e, {q, k, v, out}) && flash_attention_addresses(shape, e)) {
      flash_attention_forward(stream, sequences, shape, e, scale, q, k, v, out, lse);
      return;
    }
  }
  const dim3 grid = detail::attention_grid(sequences, shape.queries.t_len);
  const std::size_t bytes = 2 * sizeof(T) * detail::attention_rows * e;
  detail::with_head_capacity(e, [&]<int MaxE>() {
    detail::fused_attention_forward_kernel<MaxE, T>
        <<<grid, detail::attention_rows, bytes, stream>>>(shape, e, scale, q, k, v, out, lse);
  });
  TPX_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void fused_attention_backward(cudaStream_t stream, std::int64_t sequences,
                              kernels::attention_shape shape, int e, float scale, const T* q,
                              const T* k, const T* v, const T* dout, const float* lse,
                              const float* delta, T* dq, T* dk, T* dv) {
  if (sequences <= 0 || shape.keys.t_len <= 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    if (flash_attention_applies(e, {q, k, v, dout, dq, dk, dv}) &&
        flash_attention_addresses(shape, e)) {
      flash_attention_backward(stream, sequences, shape, e, scale, q, k, v, dout, lse, delta, dq,
                               dk, dv);
      return;
    }
  }
  const std::size_t dq_bytes = 2 * sizeof(T) * detail::attention_rows * e;
  const std::size_t dkdv_bytes = (sizeof(float) * (e + 2) + sizeof(T) * e) * detail::attention_rows;
  detail::with_head_capacity(e, [&]<int MaxE>() {
    if (shape.queries.t_len > 0)
      detail::fused_attention_dq_kernel<MaxE, T>
          <<<detail::attention_grid(sequences, shape.queries.t_len), detail::attention_rows,
             dq_bytes, stream>>>(shape, e, scale, q, k, v, dout, lse, delta, dq);
    detail::fused_attention_dkdv_kernel<MaxE, T>
        <<<detail::attention_grid(sequences / shape.group, shape.keys.t_len),
           detail::attention_rows, dkdv_bytes, stream>>>(shape, e, scale, q, k, v, dout, lse, delta,
                                                         dk, dv);
  });
  TPX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tpx::cuda

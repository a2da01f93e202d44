// RMSNorm over rows of up to 1024 columns with one warp per row and the row in registers: the
// block programs of the GPU's RMSNorm for the widths transformers use (GPT-2's D = 768, the MLP
// trainer's 1024), written once for any `Block` that supplies a thread's lane and warp,
// __syncthreads, a warp shuffle and shared memory. On the GPU that is the hardware
// (cuda/kernels/warp_block.hpp, launched by cuda/kernels/norms.hpp); in the host tests it is an
// emulated block (tests/support/simt_block.hpp), so the programs run and are checked here.
//
// Why a warp, and why registers: the block-per-row kernels read a row, meet at two barriers for
// the block's sum, and read it again; the backward then reads x and dy a third time for the
// weight gradient's column sums. Here a lane loads its share of the row once (at most 32
// elements, in 16-byte vectors), the row's sum is five shuffles, and the outputs are computed
// from the registers: the forward reads x and writes y, the backward reads x and dy and writes
// dx, the least traffic each can have.
//   forward   r = rmsnorm_inverse_rms(sum x^2), y = x r w            (kernels/rmsnorm.hpp)
//   backward  c = rmsnorm_backward_scale(sum w dy x), dx = r (w dy - x c);
//             each lane also adds dy x r into its columns' weight-gradient sums, which stay in
//             registers across the warp's rows (a lane's columns are the same in every row).
//             At the end the block adds its warps' sums in warp order (through shared memory)
//             into dw_partials[block, :], and the caller adds those over blocks in block order:
//             no atomics, so the result does not depend on scheduling.
// Warp w of block b takes rows b * warps_per_block + w, then strides by the grid's warps.
// Lane l holds the W-element vectors l, l + 32, l + 64, ... of its row (W = 16 bytes of the
// widest element type when every row is aligned to it, else 1). The sums are trees of fp32
// additions: they agree with the serial row functions to a few ulps per sum, not bit for bit.
#pragma once

#include <cstdint>

#include "tpx/core/config.hpp"
#include "tpx/kernels/rmsnorm.hpp"

namespace tpx::kernels::warp_rows {

inline constexpr int lanes = 32;
inline constexpr int warps_per_block = 8;
// The widest row a warp holds: 32 elements per lane.
inline constexpr std::int64_t max_cols = 1024;

// The backward's shared memory: one fp32 weight-gradient sum per warp and column.
inline std::int64_t backward_shared_bytes(std::int64_t d) {
  return warps_per_block * d * static_cast<std::int64_t>(sizeof(float));
}

// W consecutive elements, read or written as one aligned access on the GPU (element by element
// on the host, where the emulated block runs).
template <class T, int W>
struct alignas(sizeof(T) * W) pack {
  T v[W];
};

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

// Calls fn(k, i) for each of this lane's vectors k of a row of d elements, i its first column.
template <int W, class Fn>
TPX_HOST_DEVICE inline void for_lane_vectors(int lane, std::int64_t d, Fn&& fn) {
  TPX_UNROLL
  for (int k = 0; k < lanes / W; ++k) {
    const std::int64_t i = static_cast<std::int64_t>(k * lanes + lane) * W;
    if (i < d) fn(k, i);
  }
}

// The sum of every lane's value, on every lane (a butterfly: each lane adds the same pairs, so
// all lanes hold the same bits).
template <class Block>
TPX_HOST_DEVICE inline float warp_sum(Block& block, float value) {
  for (int offset = lanes / 2; offset > 0; offset /= 2) value += block.shfl_xor(value, offset);
  return value;
}

// y[row] = rmsnorm(x[row]) * w; rstd[row] = 1 / rms (rstd may be null). y may be x.
template <int W, class T, class Wt, class Block>
TPX_HOST_DEVICE void rmsnorm_forward(Block& block, std::int64_t block_index, std::int64_t blocks,
                                     std::int64_t rows, std::int64_t d, const T* x, const Wt* w,
                                     float eps, T* y, float* rstd) {
  constexpr int K = lanes / W;  // vectors per lane
  const int lane = block.lane();
  for (std::int64_t row = block_index * warps_per_block + block.warp(); row < rows;
       row += blocks * warps_per_block) {
    pack<T, W> xs[K];
    float squares = 0.0f;
    for_lane_vectors<W>(lane, d, [&](int k, std::int64_t i) {
      xs[k] = load<W>(x + row * d + i);
      TPX_UNROLL
      for (int j = 0; j < W; ++j) {
        const float v = static_cast<float>(xs[k].v[j]);
        squares += v * v;
      }
    });
    const float r = rmsnorm_inverse_rms(warp_sum(block, squares), d, eps);
    for_lane_vectors<W>(lane, d, [&](int k, std::int64_t i) {
      const pack<Wt, W> ws = load<W>(w + i);
      pack<T, W> out;
      TPX_UNROLL
      for (int j = 0; j < W; ++j)
        out.v[j] = static_cast<T>(rmsnorm_output(static_cast<float>(xs[k].v[j]), r, static_cast<float>(ws.v[j])));
      store<W>(y + row * d + i, out);
    });
    if (lane == 0 && rstd != nullptr) rstd[row] = r;
  }
}

// dx[row] from dy, x and the saved rstd; dw_partials[block_index * d + c] = the sum over this
// block's rows of dy x r at column c (overwritten). dx may be dy. Shared memory:
// backward_shared_bytes(d).
template <int W, class T, class Wt, class Block>
TPX_HOST_DEVICE void rmsnorm_backward(Block& block, std::int64_t block_index, std::int64_t blocks,
                                      std::int64_t rows, std::int64_t d, const T* x, const Wt* w,
                                      const float* rstd, const T* dy, T* dx, float* dw_partials) {
  constexpr int K = lanes / W;
  const int lane = block.lane();
  float dw[K][W] = {};
  for (std::int64_t row = block_index * warps_per_block + block.warp(); row < rows;
       row += blocks * warps_per_block) {
    pack<T, W> xs[K], dys[K];
    float dot = 0.0f;  // sum over the row of w dy x
    for_lane_vectors<W>(lane, d, [&](int k, std::int64_t i) {
      xs[k] = load<W>(x + row * d + i);
      dys[k] = load<W>(dy + row * d + i);
      const pack<Wt, W> ws = load<W>(w + i);
      TPX_UNROLL
      for (int j = 0; j < W; ++j)
        dot += rmsnorm_backward_term(static_cast<float>(xs[k].v[j]), static_cast<float>(ws.v[j]),
                                     static_cast<float>(dys[k].v[j]));
    });
    const float r = rstd[row];
    const float c = rmsnorm_backward_scale(warp_sum(block, dot), r, d);
    for_lane_vectors<W>(lane, d, [&](int k, std::int64_t i) {
      const pack<Wt, W> ws = load<W>(w + i);
      pack<T, W> out;
      TPX_UNROLL
      for (int j = 0; j < W; ++j) {
        const float xv = static_cast<float>(xs[k].v[j]), dyv = static_cast<float>(dys[k].v[j]);
        out.v[j] = static_cast<T>(rmsnorm_input_gradient(xv, static_cast<float>(ws.v[j]), dyv, r, c));
        dw[k][j] += rmsnorm_weight_gradient(xv, dyv, r);
      }
      store<W>(dx + row * d + i, out);
    });
  }
  // The block's sum of its warps' column sums, in warp order.
  float* per_warp = reinterpret_cast<float*>(block.shared());
  for_lane_vectors<W>(lane, d, [&](int k, std::int64_t i) {
    TPX_UNROLL
    for (int j = 0; j < W; ++j) per_warp[block.warp() * d + i + j] = dw[k][j];
  });
  block.sync();
  for (std::int64_t col = block.thread(); col < d; col += warps_per_block * lanes) {
    float sum = 0.0f;
    for (int warp = 0; warp < warps_per_block; ++warp) sum += per_warp[warp * d + col];
    dw_partials[block_index * d + col] = sum;
  }
}

}  // namespace tpx::kernels::warp_rows

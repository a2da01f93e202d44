// RMSNorm over rows held in registers, one warp per row of up to 1024 columns or the block's 8
// warps together per row of up to 8192: the block programs of the GPU's RMSNorm (GPT-2's D = 768,
// the MLP trainer's 1024; the kernel bench's 4096), written once for any `Block` that supplies a
// thread's lane and warp, __syncthreads, a warp shuffle and shared memory. On the GPU that is the
// hardware (cuda/kernels/warp_block.hpp, launched by cuda/kernels/norms.hpp); in the host tests
// it is an emulated block (tests/support/simt_block.hpp), so the programs run and are checked
// here.
//
// Why registers: a kernel that keeps only running sums reads a row, meets at barriers for the
// row's sum, and reads it again; the backward then reads x and dy a third time for the weight
// gradient's column sums. Here a thread loads its share of the row once (at most 32 elements, in
// 16-byte vectors), the row's sum is five shuffles (and, with 8 warps per row, one exchange
// through shared memory), and the outputs are computed from the registers: the forward reads x
// and writes y, the backward reads x and dy and writes dx, the least traffic each can have.
//   forward   r = rmsnorm_inverse_rms(sum x^2), y = x r w            (kernels/rmsnorm.hpp)
//   backward  c = rmsnorm_backward_scale(sum w dy x), dx = r (w dy - x c);
//             each thread also adds dy x r into its columns' weight-gradient sums, which stay
//             in registers across its rows (a thread's columns are the same in every row). At
//             the end the block's sums go to dw_partials[block, :] (with a warp per row, the
//             warps' sums added in warp order through shared memory), and the caller adds
//             those over blocks in block order: no atomics, so the result does not depend on
//             scheduling.
// With Warps warps per row, a block takes 8 / Warps rows at a time: rows
// b * (8 / Warps) + g for its row groups g, then strided by the grid's groups. Thread m of a
// row's group (m < 32 Warps) holds the W-element vectors m, m + 32 Warps, m + 64 Warps, ... of
// the row (W = 16 bytes of the widest element type when every row is aligned to it, else 1). The
// sums are trees of fp32 additions: they agree with the serial row functions to a few ulps per
// sum, not bit for bit.
#pragma once

#include <cstdint>

#include "tpx/core/config.hpp"
#include "tpx/kernels/packs.hpp"
#include "tpx/kernels/rmsnorm.hpp"

namespace tpx::kernels::warp_rows {

inline constexpr int lanes = warp_lanes;
inline constexpr int warps_per_block = 8;
inline constexpr int elements_per_thread = 32;
// The widest row a group of Warps warps holds.
template <int Warps>
inline constexpr std::int64_t max_cols = std::int64_t{elements_per_thread} * lanes * Warps;

// The programs' shared memory: with a warp per row, the backward's weight-gradient sum per warp
// and column; with the block on a row, each warp's part of the row's sum.
template <int Warps>
inline std::int64_t shared_bytes(std::int64_t d) {
  const std::int64_t floats = Warps == 1 ? warps_per_block * d : warps_per_block;
  return floats * static_cast<std::int64_t>(sizeof(float));
}

// Where a thread works when Warps warps share each row: its row group in the block, its place in
// the group, and the group's size.
template <int Warps>
struct row_group {
  int group;
  int member;
  static constexpr int threads = lanes * Warps;
  static constexpr int per_block = warps_per_block / Warps;
  template <class Block>
  TPX_HOST_DEVICE static row_group of(Block& block) {
    return Warps == 1 ? row_group{block.warp(), block.lane()} : row_group{0, block.thread()};
  }
};

// Calls fn(k, i) for each of this thread's vectors k of a row of d elements, i its first column.
template <int W, int Warps, class Fn>
TPX_HOST_DEVICE inline void for_thread_vectors(row_group<Warps> at, std::int64_t d, Fn&& fn) {
  TPX_UNROLL
  for (int k = 0; k < elements_per_thread / W; ++k) {
    const std::int64_t i = (static_cast<std::int64_t>(k) * row_group<Warps>::threads + at.member) * W;
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

// The sum of value over the row's group, on every thread of it: the warp's sum, then with the
// block on the row, the warps' sums in warp order through shared memory (every thread of the
// block must call it).
template <int Warps, class Block>
TPX_HOST_DEVICE inline float row_sum(Block& block, float value) {
  value = warp_sum(block, value);
  if constexpr (Warps == 1) {
    return value;
  } else {
    float* per_warp = reinterpret_cast<float*>(block.shared());
    if (block.lane() == 0) per_warp[block.warp()] = value;
    block.sync();
    float total = 0.0f;
    for (int warp = 0; warp < warps_per_block; ++warp) total += per_warp[warp];
    block.sync();  // per_warp is rewritten by the next row's sum
    return total;
  }
}

// y[row] = rmsnorm(x[row]) * w; rstd[row] = 1 / rms (rstd may be null). y may be x.
template <int W, int Warps, class T, class Wt, class Block>
TPX_HOST_DEVICE void rmsnorm_forward(Block& block, std::int64_t block_index, std::int64_t blocks,
                                     std::int64_t rows, std::int64_t d, const T* x, const Wt* w,
                                     float eps, T* y, float* rstd) {
  using group = row_group<Warps>;
  constexpr int K = elements_per_thread / W;  // vectors per thread
  const group at = group::of(block);
  // Every thread of a block runs the same number of rounds (row_sum's barriers need them all).
  for (std::int64_t first = block_index * group::per_block; first < rows; first += blocks * group::per_block) {
    const std::int64_t row = first + at.group;
    const bool real = row < rows;
    pack<T, W> xs[K];
    float squares = 0.0f;
    for_thread_vectors<W>(at, real ? d : 0, [&](int k, std::int64_t i) {
      xs[k] = load<W>(x + row * d + i);
      TPX_UNROLL
      for (int j = 0; j < W; ++j) {
        const float v = static_cast<float>(xs[k].v[j]);
        squares += v * v;
      }
    });
    const float r = rmsnorm_inverse_rms(row_sum<Warps>(block, squares), d, eps);
    for_thread_vectors<W>(at, real ? d : 0, [&](int k, std::int64_t i) {
      const pack<Wt, W> ws = load<W>(w + i);
      pack<T, W> out;
      TPX_UNROLL
      for (int j = 0; j < W; ++j)
        out.v[j] = static_cast<T>(rmsnorm_output(static_cast<float>(xs[k].v[j]), r, static_cast<float>(ws.v[j])));
      store<W>(y + row * d + i, out);
    });
    if (real && at.member == 0 && rstd != nullptr) rstd[row] = r;
  }
}

// dx[row] from dy, x and the saved rstd; dw_partials[block_index * d + c] = the sum over this
// block's rows of dy x r at column c (overwritten). dx may be dy. Shared memory:
// shared_bytes<Warps>(d).
template <int W, int Warps, class T, class Wt, class Block>
TPX_HOST_DEVICE void rmsnorm_backward(Block& block, std::int64_t block_index, std::int64_t blocks,
                                      std::int64_t rows, std::int64_t d, const T* x, const Wt* w,
                                      const float* rstd, const T* dy, T* dx, float* dw_partials) {
  using group = row_group<Warps>;
  constexpr int K = elements_per_thread / W;
  const group at = group::of(block);
  float dw[K][W] = {};
  for (std::int64_t first = block_index * group::per_block; first < rows; first += blocks * group::per_block) {
    const std::int64_t row = first + at.group;
    const std::int64_t cols = row < rows ? d : 0;  // what this thread reads of its row
    pack<T, W> xs[K], dys[K];
    float dot = 0.0f;  // sum over the row of w dy x
    for_thread_vectors<W>(at, cols, [&](int k, std::int64_t i) {
      xs[k] = load<W>(x + row * d + i);
      dys[k] = load<W>(dy + row * d + i);
      const pack<Wt, W> ws = load<W>(w + i);
      TPX_UNROLL
      for (int j = 0; j < W; ++j)
        dot += rmsnorm_backward_term(static_cast<float>(xs[k].v[j]), static_cast<float>(ws.v[j]),
                                     static_cast<float>(dys[k].v[j]));
    });
    const float total = row_sum<Warps>(block, dot);
    if (cols == 0) continue;
    const float r = rstd[row];
    const float c = rmsnorm_backward_scale(total, r, d);
    for_thread_vectors<W>(at, d, [&](int k, std::int64_t i) {
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
  if constexpr (Warps == warps_per_block) {
    // Each column is one thread's: its sums are the block's.
    for_thread_vectors<W>(at, d, [&](int k, std::int64_t i) {
      TPX_UNROLL
      for (int j = 0; j < W; ++j) dw_partials[block_index * d + i + j] = dw[k][j];
    });
  } else {
    // The block's sum of its warps' column sums, in warp order.
    float* per_warp = reinterpret_cast<float*>(block.shared());
    for_thread_vectors<W>(at, d, [&](int k, std::int64_t i) {
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
}

}  // namespace tpx::kernels::warp_rows

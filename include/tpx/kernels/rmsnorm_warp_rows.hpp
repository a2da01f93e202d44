// RMSNorm over rows held in registers: the block programs of the GPU's RMSNorm for rows of up
// to 8192 columns (GPT-2's D = 768, the MLP trainer's 1024, the kernel bench's 4096), launched by
// cuda/kernels/norms.hpp and run on an emulated block by the host tests. kernels/warp_rows.hpp
// says how a row is spread over a warp or a block's warps.
//
// Why registers: a kernel that keeps only running sums reads a row, meets at barriers for the
// row's sum, and reads it again; the backward then reads x and dy a third time for the weight
// gradient's column sums. Here the forward reads x and writes y, the backward reads x and dy and
// writes dx, the least traffic each can have.
//   forward   r = rmsnorm_inverse_rms(sum x^2), y = x r w            (kernels/rmsnorm.hpp)
//   backward  c = rmsnorm_backward_scale(sum w dy x), dx = r (w dy - x c);
//             each thread also adds dy x r into its columns' weight-gradient sums, which stay
//             in registers across its rows. At the end the block's sums go to
//             dw_partials[block, :], and the caller adds those over blocks in block order: no
//             atomics, so the result does not depend on scheduling.
#pragma once

#include <cstdint>

#include "tpx/core/config.hpp"
#include "tpx/kernels/rmsnorm.hpp"
#include "tpx/kernels/warp_rows.hpp"

namespace tpx::kernels::warp_rows {

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
  store_block_column_sums<W>(block, at, d, dw, dw_partials + block_index * d);
}

}  // namespace tpx::kernels::warp_rows

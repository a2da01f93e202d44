// LayerNorm over rows held in registers: the block programs of the GPU's LayerNorm for rows of up
// to 8192 columns (GPT-2's D = 768, the kernel bench's 4096), launched by cuda/kernels/norms.hpp
// and run on an emulated block by the host tests. kernels/warp_rows.hpp says how a row is spread
// over a warp or a block's warps.
//
// LayerNorm needs two row sums forward and two backward. A kernel that keeps only running sums
// reads the row once per sum and once more for the outputs: three reads of x forward, and two of
// x and dy backward plus a third for the parameters' column sums. Here each thread loads its part
// of the row once and every sum and output comes from registers:
//   forward   mean = layernorm_mean(sum x); then the variance around it (never E[x^2] - mean^2,
//             which cancels) from the same registers; y = xhat w + b      (kernels/layernorm.hpp)
//   backward  the sums of w dy and w dy xhat, then dx; each thread also adds dy xhat and dy into
//             its columns' weight and bias gradient sums, which stay in registers across its
//             rows, and the block writes them once to dw_partials[block, :] and
//             db_partials[block, :]. The caller adds those over blocks in block order: no
//             atomics, so the result does not depend on scheduling.
// The forward reads x and writes y; the backward reads x and dy and writes dx.
#pragma once

#include <cstdint>

#include "tpx/core/config.hpp"
#include "tpx/kernels/layernorm.hpp"
#include "tpx/kernels/warp_rows.hpp"

namespace tpx::kernels::warp_rows {

// y[row] = layernorm(x[row]) * w + b; stats[row] = (mean, rstd) (stats may be null). y may be x.
// Shared memory: shared_bytes<Warps>(d) when Warps > 1.
template <int W, int Warps, class T, class Wt, class Block>
TPX_HOST_DEVICE void layernorm_forward(Block& block, std::int64_t block_index, std::int64_t blocks,
                                       std::int64_t rows, std::int64_t d, const T* x, const Wt* w, const Wt* b,
                                       float eps, T* y, layernorm_stats* stats) {
  using group = row_group<Warps>;
  constexpr int K = elements_per_thread / W;
  const group at = group::of(block);
  // Every thread of a block runs the same number of rounds (row_sum's barriers need them all).
  for (std::int64_t first = block_index * group::per_block; first < rows; first += blocks * group::per_block) {
    const std::int64_t row = first + at.group;
    const std::int64_t cols = row < rows ? d : 0;  // what this thread reads of its row
    pack<T, W> xs[K];
    float sum = 0.0f;
    for_thread_vectors<W>(at, cols, [&](int k, std::int64_t i) {
      xs[k] = load<W>(x + row * d + i);
      TPX_UNROLL
      for (int j = 0; j < W; ++j) sum += static_cast<float>(xs[k].v[j]);
    });
    const float mean = layernorm_mean(row_sum<Warps>(block, sum), d);
    float variance = 0.0f;
    for_thread_vectors<W>(at, cols, [&](int k, std::int64_t) {
      TPX_UNROLL
      for (int j = 0; j < W; ++j) variance += layernorm_variance_term(static_cast<float>(xs[k].v[j]), mean);
    });
    const layernorm_stats s{mean, layernorm_rstd(row_sum<Warps>(block, variance), d, eps)};
    for_thread_vectors<W>(at, cols, [&](int k, std::int64_t i) {
      const pack<Wt, W> ws = load<W>(w + i), bs = load<W>(b + i);
      pack<T, W> out;
      TPX_UNROLL
      for (int j = 0; j < W; ++j)
        out.v[j] = static_cast<T>(layernorm_output(static_cast<float>(xs[k].v[j]), s, static_cast<float>(ws.v[j]),
                                                   static_cast<float>(bs.v[j])));
      store<W>(y + row * d + i, out);
    });
    if (cols != 0 && at.member == 0 && stats != nullptr) stats[row] = s;
  }
}

// dx[row] from dy, x and the saved stats; dw_partials[block_index * d + c] and
// db_partials[block_index * d + c] = the sums over this block's rows of dy xhat and dy at column
// c (overwritten). dx may be dy. Shared memory: shared_bytes<Warps>(d).
template <int W, int Warps, class T, class Wt, class Block>
TPX_HOST_DEVICE void layernorm_backward(Block& block, std::int64_t block_index, std::int64_t blocks,
                                        std::int64_t rows, std::int64_t d, const T* x, const Wt* w,
                                        const layernorm_stats* stats, const T* dy, T* dx, float* dw_partials,
                                        float* db_partials) {
  using group = row_group<Warps>;
  constexpr int K = elements_per_thread / W;
  const group at = group::of(block);
  float dw[K][W] = {}, db[K][W] = {};
  for (std::int64_t first = block_index * group::per_block; first < rows; first += blocks * group::per_block) {
    const std::int64_t row = first + at.group;
    const std::int64_t cols = row < rows ? d : 0;
    const layernorm_stats s = cols != 0 ? stats[row] : layernorm_stats{0.0f, 0.0f};
    pack<T, W> xs[K], dys[K];
    layernorm_backward_sums sums{0.0f, 0.0f};
    for_thread_vectors<W>(at, cols, [&](int k, std::int64_t i) {
      xs[k] = load<W>(x + row * d + i);
      dys[k] = load<W>(dy + row * d + i);
      const pack<Wt, W> ws = load<W>(w + i);
      TPX_UNROLL
      for (int j = 0; j < W; ++j) {
        const layernorm_backward_sums t = layernorm_backward_terms(
            static_cast<float>(xs[k].v[j]), static_cast<float>(ws.v[j]), static_cast<float>(dys[k].v[j]), s);
        sums.w_dy += t.w_dy;
        sums.w_dy_xhat += t.w_dy_xhat;
      }
    });
    sums.w_dy = row_sum<Warps>(block, sums.w_dy);
    sums.w_dy_xhat = row_sum<Warps>(block, sums.w_dy_xhat);
    if (cols == 0) continue;
    for_thread_vectors<W>(at, d, [&](int k, std::int64_t i) {
      const pack<Wt, W> ws = load<W>(w + i);
      pack<T, W> out;
      TPX_UNROLL
      for (int j = 0; j < W; ++j) {
        const float xv = static_cast<float>(xs[k].v[j]), dyv = static_cast<float>(dys[k].v[j]);
        out.v[j] = static_cast<T>(layernorm_input_gradient(xv, static_cast<float>(ws.v[j]), dyv, s, sums, d));
        dw[k][j] += layernorm_weight_gradient(xv, dyv, s);
        db[k][j] += dyv;
      }
      store<W>(dx + row * d + i, out);
    });
  }
  store_block_column_sums<W>(block, at, d, dw, dw_partials + block_index * d);
  store_block_column_sums<W>(block, at, d, db, db_partials + block_index * d);
}

}  // namespace tpx::kernels::warp_rows

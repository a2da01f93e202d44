// The softmax statistics (max and sum of exp(x - max), kernels/cross_entropy.hpp's
// softmax_stats) of each row of a [rows, cols] array of logits in one pass: the block program of
// the GPU kernel behind the vocab-parallel cross-entropy (nn/cross_entropy.hpp), written once for
// any `Block` that supplies a thread's lane and warp, __syncthreads, a warp shuffle and shared
// memory. On the GPU that is the hardware (cuda/kernels/warp_block.hpp, launched by
// cuda/kernels/softmax.hpp); in the host tests it is an emulated block
// (tests/support/simt_block.hpp).
//
// Why one pass: the loss needs each row's max m and s = sum exp(x - m). Taken as two folds, the
// max and then the sum, they read the logits twice, and the logits are the step's largest tensor
// (GPT-2: 16k rows of 50,304). Here each thread keeps the stats of what it has read and merges in
// each 16-byte vector as it comes (the online softmax of Milakov and Gimelshein, 2018): the
// vector's own max and sum of exps, then merge(), which rescales the smaller side's sum once.
// The block then merges its threads' stats: five shuffles within each warp, then the 8 warps'
// in warp order through shared memory. A block takes a row at a time, rows strided by the grid.
// Vectors of -inf (masked logits) add nothing, as in softmax_stats_of.
#pragma once

#include <math.h>  // INFINITY

#include <cstddef>
#include <cstdint>

#include "tpx/core/config.hpp"
#include "tpx/kernels/cross_entropy.hpp"
#include "tpx/kernels/packs.hpp"

namespace tpx::kernels::softmax_rows {

inline constexpr int warps_per_block = 8;
inline constexpr int threads = warps_per_block * warp_lanes;
inline constexpr std::size_t shared_bytes = sizeof(softmax_stats) * warps_per_block;

// max_out[row] and sum_out[row]: the softmax stats of each row of logits, for the rows
// block_index, block_index + blocks, ... W divides cols; logits aligned to W elements.
template <int W, class T, class Block>
TPX_HOST_DEVICE void softmax_stats_of_rows(Block& block, std::int64_t block_index, std::int64_t blocks, std::int64_t rows,
                                           std::int64_t cols, const T* logits, float* max_out, float* sum_out) {
  auto* per_warp = reinterpret_cast<kernels::softmax_stats*>(block.shared());
  for (std::int64_t row = block_index; row < rows; row += blocks) {
    kernels::softmax_stats acc{-INFINITY, 0.0f};
    for (std::int64_t i = static_cast<std::int64_t>(block.thread()) * W; i < cols; i += threads * W) {
      const pack<T, W> x = load<W>(logits + row * cols + i);
      acc = merge(acc, softmax_stats_of(W, x.v));  // W exponentials, where W merges take 2 W
    }
    for (int offset = warp_lanes / 2; offset > 0; offset /= 2) {
      const kernels::softmax_stats other{block.shfl_xor(acc.max, offset), block.shfl_xor(acc.sum, offset)};
      acc = merge(acc, other);
    }
    if (block.lane() == 0) per_warp[block.warp()] = acc;
    block.sync();
    if (block.thread() == 0) {
      kernels::softmax_stats row_stats = per_warp[0];
      for (int warp = 1; warp < warps_per_block; ++warp) row_stats = merge(row_stats, per_warp[warp]);
      max_out[row] = row_stats.max;
      sum_out[row] = row_stats.sum;
    }
    block.sync();  // per_warp is rewritten for the next row
  }
}

}  // namespace tpx::kernels::softmax_rows

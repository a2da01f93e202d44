// Rows held in registers: what the GPU's register-row norms (kernels/rmsnorm_warp_rows.hpp,
// kernels/layernorm_warp_rows.hpp) share. A row of up to 1024 columns takes one warp; a row of up
// to 8192 takes the block's 8 warps together. A thread holds at most 32 elements of its row,
// loaded in 16-byte vectors, so a norm reads each input once, meets the rest of the row's threads
// for its row sums (five shuffles, and with 8 warps on a row one exchange through shared memory),
// and computes its outputs from the registers.
//
// The pieces are written for any `Block` that supplies a thread's lane and warp, __syncthreads, a
// warp shuffle and shared memory: the hardware on the GPU (cuda/kernels/warp_block.hpp), an
// emulated block in the host tests (tests/support/simt_block.hpp), so the programs built from
// them run and are checked here.
//
// With Warps warps per row, a block takes 8 / Warps rows at a time: rows b * (8 / Warps) + g for
// its row groups g, then strided by the grid's groups. Thread m of a row's group (m < 32 Warps)
// holds the W-element vectors m, m + 32 Warps, m + 64 Warps, ... of the row (W = 16 bytes of the
// widest element type when every row is aligned to it, else 1); its columns are the same in every
// row, so a backward keeps its parameter gradients' column sums in registers across its rows and
// writes the block's sums once (store_block_column_sums). The row sums are trees of fp32
// additions: they agree with the serial row functions to a few ulps per sum, not bit for bit.
#pragma once

#include <cstdint>

#include "tpx/core/config.hpp"
#include "tpx/kernels/packs.hpp"

namespace tpx::kernels::warp_rows {

inline constexpr int lanes = warp_lanes;
inline constexpr int warps_per_block = 8;
inline constexpr int elements_per_thread = 32;
// The widest row a group of Warps warps holds.
template <int Warps>
inline constexpr std::int64_t max_cols = std::int64_t{elements_per_thread} * lanes * Warps;

// The programs' shared memory: with a warp per row, one column sum per warp and column (what
// store_block_column_sums exchanges); with the block on a row, each warp's part of a row sum.
template <int Warps>
inline std::int64_t shared_bytes(std::int64_t d) {
  const std::int64_t floats = Warps == 1 ? warps_per_block * d : warps_per_block;
  return floats * static_cast<std::int64_t>(sizeof(float));
}

// Where a thread works when Warps warps share each row: its row group in the block, its place in
// the group, and the group's size.
template <int Warps>
struct row_group {
  static_assert(Warps == 1 || Warps == warps_per_block, "a row takes one warp or the whole block");
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

// out[c] = the block's sum of sums[k][j] over its threads holding column c = i + j of vector k:
// with the block on a row each column is one thread's; with a warp per row, the warps' sums are
// added in warp order through shared memory (every thread of the block must call it; it may be
// called again at once).
template <int W, int Warps, class Block>
TPX_HOST_DEVICE void store_block_column_sums(Block& block, row_group<Warps> at, std::int64_t d,
                                             const float (&sums)[elements_per_thread / W][W], float* out) {
  if constexpr (Warps == warps_per_block) {
    for_thread_vectors<W>(at, d, [&](int k, std::int64_t i) {
      TPX_UNROLL
      for (int j = 0; j < W; ++j) out[i + j] = sums[k][j];
    });
  } else {
    float* per_warp = reinterpret_cast<float*>(block.shared());
    for_thread_vectors<W>(at, d, [&](int k, std::int64_t i) {
      TPX_UNROLL
      for (int j = 0; j < W; ++j) per_warp[block.warp() * d + i + j] = sums[k][j];
    });
    block.sync();
    for (std::int64_t col = block.thread(); col < d; col += warps_per_block * lanes) {
      float sum = 0.0f;
      for (int warp = 0; warp < warps_per_block; ++warp) sum += per_warp[warp * d + col];
      out[col] = sum;
    }
    block.sync();  // per_warp is rewritten by the next call
  }
}

}  // namespace tpx::kernels::warp_rows

// The second pass of the GPU's deterministic column sums (the norms' weight gradients,
// nn layers' sum_columns): out[c] += the sum over chunks of partial[chunk, c], where each chunk's
// row holds one block's (or one group of rows') sums. Written once for any `Block` that supplies a
// thread's lane and warp, __syncthreads and shared memory, so that the host tests run it on an
// emulated block (tests/support/simt_block.hpp) and the GPU on the hardware
// (cuda/kernels/rows.hpp).
//
// Why a program of its own: a thread per column adding a few hundred chunks one after the other
// is a chain of additions, each waiting for its load, and at a transformer's widths (768
// columns) there are too few columns to fill the device: 768 threads, each waiting on a few
// hundred loads in turn. Here a block of 8 warps takes 32 columns, one per lane: warp w adds
// chunks w, w + 8, w + 16, ... in order, and warp 0 then adds the 8 warps' sums in warp order.
// Each warp reads 32 consecutive floats of a chunk's row at a time (128 bytes), the chains are
// 8 times shorter, and the order of the additions is fixed: the result does not depend on
// scheduling.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tpx/core/config.hpp"
#include "tpx/kernels/packs.hpp"  // warp_lanes

namespace tpx::kernels::column_totals {

inline constexpr int columns_per_block = warp_lanes;  // one per lane
inline constexpr int slices = 8;              // one per warp: the chunks a warp adds
inline constexpr std::size_t shared_bytes = sizeof(float) * columns_per_block * slices;

// How many blocks cover d columns.
inline std::int64_t blocks_for(std::int64_t d) { return (d + columns_per_block - 1) / columns_per_block; }

// out[c] += sum over chunk of partial[chunk * d + c] for the columns c of block `block_index`.
template <class Block>
TPX_HOST_DEVICE void add_columns(Block& block, std::int64_t block_index, std::int64_t d, std::int64_t chunks,
                                 const float* partial, float* out) {
  float* slice_sums = reinterpret_cast<float*>(block.shared());  // [slices][columns_per_block]
  const std::int64_t c = block_index * columns_per_block + block.lane();
  float sum = 0.0f;
  if (c < d)
    for (std::int64_t chunk = block.warp(); chunk < chunks; chunk += slices) sum += partial[chunk * d + c];
  slice_sums[block.warp() * columns_per_block + block.lane()] = sum;
  block.sync();
  if (block.warp() == 0 && c < d) {
    float total = 0.0f;
    for (int slice = 0; slice < slices; ++slice) total += slice_sums[slice * columns_per_block + block.lane()];
    out[c] += total;
  }
}

}  // namespace tpx::kernels::column_totals

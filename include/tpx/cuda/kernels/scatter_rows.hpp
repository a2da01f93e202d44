// scatter_add_rows on the GPU: out[index(r) * cols + c] += term(r, c) for a [rows, cols] grid of
// terms into [out_rows, cols], the embedding tables' gradients (nn/embedding.hpp), without
// atomics, so that the sums, and a training run, repeat to the bit.
//
//   1. each row's destination index(r) and the row itself, as 32-bit keys and values;
//   2. CUB's radix sort of the pairs by destination, over the bits out_rows needs: a stable sort,
//      so each destination's rows stay in ascending order;
//   3. kernels/sorted_scatter.hpp's two passes, a block per piece of 64 sorted rows, threads over
//      the columns: the runs of each destination within a piece, then the runs that cross pieces.
// The scratch (the pairs, CUB's temporary storage, one partial row per piece) comes from the
// rank's pool in stream order. Every index(r) must lie in [0, out_rows), as for the host's loop
// (nn/embedding.hpp's tokens are checked where they are made); one outside would not only write
// out of bounds, as an atomic did, but, sorted by its low bits among the others, split a valid
// destination's run and let two blocks write its row. Nothing waits on the host, so a step that
// calls it can be captured as a CUDA graph.
#pragma once

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/kernels/launch.hpp"
#include "tpx/kernels/sorted_scatter.hpp"

namespace tpx::cuda {

namespace detail {

template <class Index>
__global__ void __launch_bounds__(block_threads)
    destinations_kernel(std::int64_t rows, Index index, std::uint32_t* dest,
                        std::uint32_t* source) {
  for (std::int64_t r = global_thread(); r < rows; r += grid_stride()) {
    dest[r] = static_cast<std::uint32_t>(index(r));
    source[r] = static_cast<std::uint32_t>(r);
  }
}

// Pass 1 (add_piece) or 2 (join_piece) of kernels/sorted_scatter.hpp: a block per piece, its
// threads over the columns.
enum class scatter_pass { add, join };

template <scatter_pass Pass, class Term>
__global__ void __launch_bounds__(block_threads)
    sorted_scatter_kernel(std::int64_t n, std::int64_t cols, const std::uint32_t* dest,
                          const std::uint32_t* source, Term term, float* out, float* continued) {
  namespace scatter = kernels::sorted_scatter;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    if constexpr (Pass == scatter_pass::add)
      scatter::add_piece(blockIdx.x, c, n, cols, dest, source, term, out, continued);
    else
      scatter::join_piece(blockIdx.x, c, n, cols, dest, continued, out);
  }
}

}  // namespace detail

template <class Index, class Term>
void scatter_add_rows(cudaStream_t stream, cudaMemPool_t pool, std::int64_t rows, std::int64_t cols,
                      std::int64_t out_rows, const Index& index, const Term& term, float* out) {
  if (rows <= 0 || cols <= 0) return;
  if (out_rows <= 0)
    throw std::invalid_argument("tpx: scatter_add_rows: " + std::to_string(rows) +
                                " rows into a table of no rows");
  if (rows > std::numeric_limits<std::int32_t>::max() ||
      out_rows > std::numeric_limits<std::int32_t>::max())
    throw std::length_error(
        "tpx: scatter_add_rows on the GPU sorts 32-bit row numbers: " + std::to_string(rows) +
        " rows into " + std::to_string(out_rows) + " is too many");
  namespace scatter = kernels::sorted_scatter;
  const auto n = static_cast<std::size_t>(rows);
  auto dest = device_buffer<std::uint32_t>::for_overwrite(n, pool, stream);
  auto source = device_buffer<std::uint32_t>::for_overwrite(n, pool, stream);
  auto sorted_dest = device_buffer<std::uint32_t>::for_overwrite(n, pool, stream);
  auto sorted_source = device_buffer<std::uint32_t>::for_overwrite(n, pool, stream);
  detail::destinations_kernel<<<grid_for(rows), block_threads, 0, stream>>>(
      rows, index, dest.data(), source.data());
  TPX_CUDA_CHECK(cudaGetLastError());

  const int end_bit =
      std::max(1, static_cast<int>(std::bit_width(static_cast<std::uint64_t>(out_rows - 1))));
  const auto sort = [&](void* scratch, std::size_t& scratch_bytes) {
    TPX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        scratch, scratch_bytes, dest.data(), sorted_dest.data(), source.data(),
        sorted_source.data(), static_cast<int>(rows), 0, end_bit, stream));
  };
  std::size_t scratch_bytes = 0;
  sort(nullptr, scratch_bytes);  // a null scratch asks for its size
  // At least a byte: a null scratch would ask again instead of sorting.
  auto scratch = device_buffer<unsigned char>::for_overwrite(
      std::max<std::size_t>(scratch_bytes, 1), pool, stream);
  sort(scratch.data(), scratch_bytes);

  const std::int64_t pieces = scatter::pieces_for(rows);
  // Only the pieces whose first run began earlier write (and join reads) their row.
  auto continued =
      device_buffer<float>::for_overwrite(static_cast<std::size_t>(pieces * cols), pool, stream);
  const auto blocks = static_cast<unsigned>(pieces);
  detail::sorted_scatter_kernel<detail::scatter_pass::add, Term>
      <<<blocks, block_threads, 0, stream>>>(rows, cols, sorted_dest.data(), sorted_source.data(),
                                             term, out, continued.data());
  TPX_CUDA_CHECK(cudaGetLastError());
  detail::sorted_scatter_kernel<detail::scatter_pass::join, Term>
      <<<blocks, block_threads, 0, stream>>>(rows, cols, sorted_dest.data(), sorted_source.data(),
                                             term, out, continued.data());
  TPX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tpx::cuda

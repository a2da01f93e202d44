// The machinery of tpx's row kernels (softmax, cross-entropy, RMSNorm, LayerNorm): one block
// per row, threads striding over the row in 16-byte vectors when the row allows, partial results
// combined across the block with cub::BlockReduce and handed to every thread.
//
//   launch_by_width(...)               the vector or the scalar instantiation of a row kernel
//   launch_rows(...)                   the same, one block per row
//   for_row_vectors<W>(d, fn)          calls fn(i) for this thread's vector starts i in [0, d)
//   block_combine(scratch, v, op)      the block's combination of every thread's v, on every
//                                      thread (op associative; the order is CUB's tree)
//   column_sums(...)                   the deterministic sums over rows of per-element terms that
//                                      the norms' weight gradients need (norms.hpp)
//   add_column_totals(...)             its second pass, out[c] += the sum of a column of
//                                      per-chunk partial sums (kernels/column_totals.hpp), also
//                                      the last pass of the warp-per-row RMSNorm backward
//
// A block's threads read a row with consecutive threads on consecutive vectors, so each warp
// reads 512 contiguous bytes per step: full coalescing, as the bandwidth bench checks.
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/kernels/launch.hpp"
#include "tpx/cuda/kernels/warp_block.hpp"
#include "tpx/kernels/column_totals.hpp"

namespace tpx::cuda::detail {

template <int W, class Fn>
__device__ inline void for_row_vectors(std::int64_t d, Fn&& fn) {
  for (std::int64_t i = static_cast<std::int64_t>(threadIdx.x) * W; i < d; i += static_cast<std::int64_t>(blockDim.x) * W)
    fn(i);
}

template <class V>
using block_reduce = cub::BlockReduce<V, block_threads>;

// The combination over the block of every thread's value, returned on every thread. `shared`
// passes the result from thread 0 to the others; the trailing barrier lets the caller reuse
// `scratch` and `shared` at once.
template <class V, class Op>
__device__ inline V block_combine(typename block_reduce<V>::TempStorage& scratch, V& shared, V value, Op op) {
  const V total = block_reduce<V>(scratch).Reduce(value, op);
  if (threadIdx.x == 0) shared = total;
  __syncthreads();
  const V result = shared;
  __syncthreads();
  return result;
}

struct plus {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// partial[chunk * d + c] = sum over the rows of chunk of term(r, c), K sums at once
// (term returns vec<float, K>); then out_k[c] += sum over chunks, in chunk order. Two
// passes, no atomics: the result does not depend on scheduling.
template <int K, class Term>
__global__ void __launch_bounds__(block_threads)
    column_partials_kernel(std::int64_t rows, std::int64_t d, std::int64_t rows_per_chunk, Term term, float* partial) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= d) return;
  const std::int64_t chunk = blockIdx.y, first = chunk * rows_per_chunk;
  const std::int64_t last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float sum[K] = {};
  for (std::int64_t r = first; r < last; ++r) {
    const vec<float, K> t = term(r, c);
#pragma unroll
    for (int k = 0; k < K; ++k) sum[k] += t.v[k];
  }
  const std::int64_t chunks = gridDim.y;
#pragma unroll
  for (int k = 0; k < K; ++k) partial[(k * chunks + chunk) * d + c] = sum[k];
}

// out_k[c] += sum over chunks of partial[(k * chunks + chunk) * d + c], sum k in grid row k
// (kernels/column_totals.hpp: 32 columns per block, the chunks in a fixed order).
template <int K>
__global__ void __launch_bounds__(block_threads)
    column_totals_kernel(std::int64_t d, std::int64_t chunks, const float* partial, vec<float*, K> out) {
  namespace totals = kernels::column_totals;
  __shared__ float slice_sums[totals::slices * totals::columns_per_block];
  warp_block block(reinterpret_cast<unsigned char*>(slice_sums));
  const std::int64_t k = blockIdx.y;
  float* sums = out.v[0];  // out.v[k], chosen without indexing out by a run-time k (local memory)
#pragma unroll
  for (int i = 1; i < K; ++i)
    if (i == k) sums = out.v[i];
  totals::add_columns(block, blockIdx.x, d, chunks, partial + k * chunks * d, sums);
}

template <int K>
void add_column_totals(cudaStream_t stream, std::int64_t d, std::int64_t chunks, const float* partial,
                       vec<float*, K> out) {
  static_assert(block_threads == kernels::column_totals::slices * kernels::warp_lanes);
  const dim3 grid(static_cast<unsigned>(kernels::column_totals::blocks_for(d)), K);
  column_totals_kernel<K><<<grid, block_threads, 0, stream>>>(d, chunks, partial, out);
  TPX_CUDA_CHECK(cudaGetLastError());
}

// Launches `wide` (the W-wide instantiation of a row kernel) when `vectors`, else `narrow`, on
// `blocks` blocks with `shared` bytes of dynamic shared memory.
template <class... Params, class... Args>
void launch_by_width(cudaStream_t stream, std::int64_t blocks, std::size_t shared, bool vectors,
                     void (*wide)(Params...), void (*narrow)(Params...), Args... args) {
  (vectors ? wide : narrow)<<<static_cast<unsigned>(blocks), block_threads, shared, stream>>>(args...);
  TPX_CUDA_CHECK(cudaGetLastError());
}

// The same with one block per row.
template <class... Params, class... Args>
void launch_rows(cudaStream_t stream, std::int64_t rows, bool vectors, void (*wide)(Params...),
                 void (*narrow)(Params...), Args... args) {
  launch_by_width(stream, row_blocks(rows), 0, vectors, wide, narrow, args...);
}

// out.v[k][c] += sum over r of term(r, c).v[k] for every column c of a [rows, d] array; the
// partials come from `pool` in stream order.
template <int K, class Term>
void column_sums(cudaStream_t stream, cudaMemPool_t pool, std::int64_t rows, std::int64_t d, const Term& term,
                 vec<float*, K> out) {
  if (rows <= 0 || d <= 0) return;
  constexpr std::int64_t target_rows_per_chunk = 64;
  const std::int64_t chunks = std::clamp<std::int64_t>((rows + target_rows_per_chunk - 1) / target_rows_per_chunk, 1, 65535);
  const std::int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  // Every (chunk, column) is written, so no zeros first.
  auto partial = device_buffer<float>::for_overwrite(static_cast<std::size_t>(K * chunks * d), pool, stream);
  const dim3 grid(static_cast<unsigned>((d + block_threads - 1) / block_threads), static_cast<unsigned>(chunks));
  column_partials_kernel<K><<<grid, block_threads, 0, stream>>>(rows, d, rows_per_chunk, term, partial.data());
  TPX_CUDA_CHECK(cudaGetLastError());
  add_column_totals<K>(stream, d, chunks, partial.data(), out);
}

}  // namespace tpx::cuda::detail

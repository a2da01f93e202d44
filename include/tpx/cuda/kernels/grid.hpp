// The device twins of three of host_space's loops over a rows x cols grid (tensor/host_space.hpp;
// the fourth, scatter_add_rows, is cuda/kernels/scatter_rows.hpp), on which the layers of nn/
// (RMSNorm over a sharded dim, vocab-parallel cross-entropy, embedding lookup) are written once
// for every memory space. The per-element math is a kernels/ functor of (r, c), the same one the
// host loops call.
//
//   reduce_rows<R>(stream, rows, cols, term, out)    out[r] = R-fold over c of term(r, c):
//                                                    a warp per row of up to short_row_cols
//                                                    columns (RMSNorm's rows of D, attention's
//                                                    of E), combined by shuffles; else one block
//                                                    per row, cub::BlockReduce
//   for_each_element(stream, rows, cols, fn)         fn(r, c) on every element, grid-stride
//                                                    (kernels/grid_walk.hpp: no division per
//                                                    element);
//                                                    a permute (kernels::permute_into) whose
//                                                    last dim stays last is copied in 16-byte
//                                                    vectors instead, its row located once per
//                                                    vector rather than once per element
//   sum_columns(stream, pool, rows, cols, term, out) out[c] += sum over r of term(r, c):
//                                                    rows.hpp's two deterministic passes
//
// The trees of the block reductions sum in another order than the host's serial loops, so the
// device agrees with the host to a few ulps per reduction, as the norms' kernels do.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/kernels/launch.hpp"
#include "tpx/cuda/kernels/rows.hpp"
#include "tpx/kernels/grid_walk.hpp"
#include "tpx/kernels/permute.hpp"

namespace tpx::cuda {

namespace detail {

template <class R>
struct combine_of {
  __device__ typename R::value_type operator()(typename R::value_type a, typename R::value_type b) const {
    return R::combine(a, b);
  }
};

// The longest row a warp reduces alone: 32 elements per lane. A block per row would leave most of
// its 256 threads idle on such rows and pay two barriers per row.
inline constexpr std::int64_t short_row_cols = 1024;
inline constexpr int warp_threads = 32;

template <class R, class Term>
__global__ void __launch_bounds__(block_threads)
    reduce_short_rows_kernel(std::int64_t rows, std::int64_t cols, Term term, float* out) {
  using Acc = typename R::value_type;
  constexpr int warp = warp_threads, warps_per_block = block_threads / warp;
  const int lane = static_cast<int>(threadIdx.x) % warp;
  const std::int64_t first =
      static_cast<std::int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / warp;
  // Every lane of a warp takes the same rows, so the whole warp reaches each shuffle.
  for (std::int64_t r = first; r < rows;
       r += static_cast<std::int64_t>(gridDim.x) * warps_per_block) {
    Acc acc = R::identity();
    for (std::int64_t c = lane; c < cols; c += warp) acc = R::combine(acc, R::element(term(r, c)));
    for (int offset = warp / 2; offset > 0; offset /= 2)
      acc = R::combine(acc, __shfl_xor_sync(0xffffffffu, acc, offset));
    if (lane == 0) out[r] = static_cast<float>(acc);
  }
}

template <class R, class Term>
__global__ void __launch_bounds__(block_threads)
    reduce_rows_kernel(std::int64_t rows, std::int64_t cols, Term term, float* out) {
  using Acc = typename R::value_type;
  __shared__ typename block_reduce<Acc>::TempStorage scratch;
  __shared__ Acc shared;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    Acc acc = R::identity();
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc = R::combine(acc, R::element(term(r, c)));
    const Acc total = block_combine(scratch, shared, acc, combine_of<R>{});
    if (threadIdx.x == 0) out[r] = static_cast<float>(total);
  }
}

template <class Fn>
__global__ void __launch_bounds__(block_threads) for_each_element_kernel(std::int64_t rows, std::int64_t cols, Fn fn) {
  const std::int64_t n = rows * cols;
  for (kernels::grid_walk walk(global_thread(), grid_stride(), cols); walk.flat < n; walk.advance())
    fn(walk.row, walk.column);
}

// permute_into's copy, W elements (16 bytes) at a time along dst's rows.
template <int W, class T>
__global__ void __launch_bounds__(block_threads)
    permute_vectors_kernel(std::int64_t rows, std::int64_t cols, kernels::permute_into<T> f) {
  const std::int64_t per_row = cols / W, n = rows * per_row;
  for (kernels::grid_walk walk(global_thread(), grid_stride(), per_row); walk.flat < n; walk.advance()) {
    const std::int64_t c = walk.column * W;
    *reinterpret_cast<vec<T, W>*>(f.dst + walk.row * cols + c) =
        *reinterpret_cast<const vec<T, W>*>(f.src + f.source_of_row(walk.row) + c);
  }
}

// Runs f in vectors if it can be: its last dim stays last (so a dst row is a run of src, and
// every row of either starts a multiple of cols from the start, as src's other strides are
// multiples of it), cols is a multiple of the vector, and both blocks are aligned to it.
template <class T>
bool permute_in_vectors(cudaStream_t stream, std::int64_t rows, std::int64_t cols,
                        const kernels::permute_into<T>& f) {
  constexpr int W = common_width<T>;
  if (!f.keeps_last_dim() || cols % W != 0 || !vectors_fit(f.src, static_cast<const T*>(f.dst))) return false;
  permute_vectors_kernel<W, T><<<grid_for(rows * cols / W), block_threads, 0, stream>>>(rows, cols, f);
  TPX_CUDA_CHECK(cudaGetLastError());
  return true;
}

template <class Term>
struct as_column_term {
  Term term;
  __device__ vec<float, 1> operator()(std::int64_t r, std::int64_t c) const { return {{term(r, c)}}; }
};

}  // namespace detail

template <class R, class Term>
void reduce_rows(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const Term& term, float* out) {
  if (rows <= 0) return;
  if (cols <= detail::short_row_cols)
    detail::reduce_short_rows_kernel<R>
        <<<grid_for(rows * detail::warp_threads), block_threads, 0, stream>>>(rows, cols, term,
                                                                              out);
  else
    detail::reduce_rows_kernel<R>
        <<<row_blocks(rows), block_threads, 0, stream>>>(rows, cols, term, out);
  TPX_CUDA_CHECK(cudaGetLastError());
}

template <class Fn>
void for_each_element(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const Fn& fn) {
  if (rows <= 0 || cols <= 0) return;
  if constexpr (kernels::is_permute_into_v<Fn>) {
    if (detail::permute_in_vectors(stream, rows, cols, fn)) return;
  }
  detail::for_each_element_kernel<<<grid_for(rows * cols), block_threads, 0, stream>>>(rows, cols, fn);
  TPX_CUDA_CHECK(cudaGetLastError());
}

template <class Term>
void sum_columns(cudaStream_t stream, cudaMemPool_t pool, std::int64_t rows, std::int64_t cols, const Term& term,
                 float* out) {
  detail::column_sums<1>(stream, pool, rows, cols, detail::as_column_term<Term>{term}, vec<float*, 1>{{out}});
}

}  // namespace tpx::cuda

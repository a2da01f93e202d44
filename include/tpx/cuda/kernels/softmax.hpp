// Softmax and the softmax cross-entropy loss over the rows of a row-major [rows, n] array of
// logits, forward and backward, on the device: the pieces of kernels/cross_entropy.hpp assembled
// in parallel.
//
//   softmax_forward(stream, rows, n, logits, probs)
//   cross_entropy_forward(stream, rows, n, logits, targets, losses, stats)
//   cross_entropy_backward(stream, rows, n, logits, targets, stats, dloss, dlogits)
//
//   softmax_stats_rows(stream, rows, n, logits, max, sum)   each row's softmax stats, one pass
//                                      (kernels/softmax_stats_rows.hpp): nn/cross_entropy.hpp's
//                                      first pass over the logits on the GPU
//   cross_entropy_gradient_rows(stream, rows, cols, logits, max, sum, target, first, dloss,
//                               dlogits)   its gradient pass, from the whole rows' stats
//
// One block per row (rows.hpp). Each thread folds its share of the row into softmax_stats, a
// 16-byte vector at a time (the vector's stats, then merge()), and cub::BlockReduce merges the
// threads' stats into the row's: the same functions that combine a vocabulary sharded across
// ranks, so a masked logit (-inf) is handled as on the host. The loss comes from
// cross_entropy_loss and the probabilities from softmax_element. targets are class indices
// (std::int64_t); a target outside [0, n) gives a NaN loss, as on the host. The forward saves
// each row's stats for the backward, which then reads the logits once. Both gradients, the
// standalone loss's and the vocab-parallel one's, are one kernel: each row's factors taken once
// (cross_entropy_gradient_factors: one exp, one multiply and one subtraction per element, within
// an ulp or two of the host's cross_entropy_gradient, which divides).
#pragma once

#include <cuda_runtime.h>
#include <math.h>

#include <cstdint>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/kernels/launch.hpp"
#include "tpx/cuda/kernels/rows.hpp"
#include "tpx/cuda/kernels/warp_block.hpp"
#include "tpx/kernels/cross_entropy.hpp"
#include "tpx/kernels/grid_terms.hpp"
#include "tpx/kernels/softmax_stats_rows.hpp"

namespace tpx::cuda {

namespace detail {

struct merge_stats {
  __device__ kernels::softmax_stats operator()(kernels::softmax_stats a, kernels::softmax_stats b) const {
    return kernels::merge(a, b);
  }
};

// The stats of a whole row, on every thread of the block.
template <int W, class T>
__device__ kernels::softmax_stats row_stats(const T* row, std::int64_t n,
                                            typename block_reduce<kernels::softmax_stats>::TempStorage& scratch,
                                            kernels::softmax_stats& shared) {
  kernels::softmax_stats acc{-INFINITY, 0.0f};  // the empty piece: merge's identity
  for_row_vectors<W>(n, [&](std::int64_t i) {
    float v[W];
    load_floats<W>(row, i, v);
    acc = kernels::merge(acc, kernels::softmax_stats_of(W, v));
  });
  return block_combine(scratch, shared, acc, merge_stats{});
}

template <int W, class T, class P>
__global__ void __launch_bounds__(block_threads) softmax_kernel(std::int64_t rows, std::int64_t n, const T* logits, P* probs) {
  __shared__ typename block_reduce<kernels::softmax_stats>::TempStorage scratch;
  __shared__ kernels::softmax_stats shared;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * n;
    const kernels::softmax_stats s = row_stats<W>(x, n, scratch, shared);
    for_row_vectors<W>(n, [&](std::int64_t i) {
      float v[W];
      load_floats<W>(x, i, v);
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = kernels::softmax_element(v[j], s);
      store_floats<W>(probs + row * n, i, v);
    });
  }
}

template <int W, class T>
__global__ void __launch_bounds__(block_threads)
    cross_entropy_forward_kernel(std::int64_t rows, std::int64_t n, const T* logits, const std::int64_t* targets,
                                 float* losses, kernels::softmax_stats* stats) {
  __shared__ typename block_reduce<kernels::softmax_stats>::TempStorage scratch;
  __shared__ kernels::softmax_stats shared;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * n;
    const kernels::softmax_stats s = row_stats<W>(x, n, scratch, shared);
    if (threadIdx.x == 0) {
      const std::int64_t t = targets[row];
      losses[row] = t < 0 || t >= n ? NAN : kernels::cross_entropy_loss(s, static_cast<float>(x[t]));
      if (stats != nullptr) stats[row] = s;
    }
  }
}

// Where a gradient row's factors (kernels::cross_entropy_gradient_factors) and its target's
// column come from: the standalone loss's saved stats with a dloss per row
// (cross_entropy_backward), or the vocab-parallel loss's whole-row max and sum with one dloss and
// a rank's block of columns starting at `first` (cross_entropy_gradient_rows).
struct saved_row_stats {
  const std::int64_t* targets;
  const kernels::softmax_stats* stats;
  const float* dloss;
  __device__ kernels::cross_entropy_gradient_factors factors(std::int64_t row) const {
    return kernels::cross_entropy_gradient_factors::of(stats[row], dloss[row]);
  }
  __device__ std::int64_t target_column(std::int64_t row) const { return targets[row]; }
};

struct whole_row_stats {
  const float* max;
  const float* sum;
  kernels::token_at target;
  std::int64_t first;
  float dloss;
  __device__ kernels::cross_entropy_gradient_factors factors(std::int64_t row) const {
    return kernels::cross_entropy_gradient_factors::of({max[row], sum[row]}, dloss);
  }
  // The target's column here; outside [0, cols) when another rank's block has it.
  __device__ std::int64_t target_column(std::int64_t row) const { return target(row) - first; }
};

// dlogits[row] from the row's factors, taken once per row, and the logits a vector at a time.
template <int W, class T, class G, class Rows>
__global__ void __launch_bounds__(block_threads)
    cross_entropy_gradient_kernel(std::int64_t rows, std::int64_t cols, const T* logits, Rows source, G* dlogits) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * cols;
    const kernels::cross_entropy_gradient_factors factors = source.factors(row);
    const std::int64_t t = source.target_column(row);
    for_row_vectors<W>(cols, [&](std::int64_t i) {
      float v[W];
      load_floats<W>(x, i, v);
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = factors(v[j], i + j == t);
      store_floats<W>(dlogits + row * cols, i, v);
    });
  }
}

template <int W, class T>
__global__ void __launch_bounds__(block_threads)
    softmax_stats_rows_kernel(std::int64_t rows, std::int64_t n, const T* logits, float* max, float* sum) {
  __shared__ kernels::softmax_stats per_warp[kernels::softmax_rows::warps_per_block];
  warp_block block(reinterpret_cast<unsigned char*>(per_warp));
  kernels::softmax_rows::softmax_stats_of_rows<W>(block, blockIdx.x, gridDim.x, rows, n, logits, max, sum);
}

}  // namespace detail

// max[row] and sum[row]: the max of logits[row] and the sum of exp(logits[row] - max), in one
// pass over the logits.
template <class T>
void softmax_stats_rows(cudaStream_t stream, std::int64_t rows, std::int64_t n, const T* logits, float* max,
                        float* sum) {
  if (rows <= 0) return;
  static_assert(block_threads == kernels::softmax_rows::threads);
  constexpr int W = common_width<T>;
  detail::launch_rows(stream, rows, row_vectors_fit(n, logits), detail::softmax_stats_rows_kernel<W, T>,
                      detail::softmax_stats_rows_kernel<1, T>, rows, n, logits, max, sum);
}

// dlogits[row, c] = dloss (softmax(x)[row, first + c] - [first + c == target(row)]) for a block
// of columns [first, first + cols) of rows whose whole-row max and sum of exps are given: the
// gradient pass of nn/cross_entropy.hpp's vocab-parallel loss, a 16-byte vector at a time
// (kernels::cross_entropy_gradient_factors). dlogits may be logits.
template <class T, class G>
void cross_entropy_gradient_rows(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* logits,
                                 const float* row_max, const float* row_sum, kernels::token_at target,
                                 std::int64_t first, float dloss, G* dlogits) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int W = common_width<T, G>;
  using Rows = detail::whole_row_stats;
  detail::launch_rows(stream, rows, row_vectors_fit(cols, logits, static_cast<const G*>(dlogits)),
                      detail::cross_entropy_gradient_kernel<W, T, G, Rows>,
                      detail::cross_entropy_gradient_kernel<1, T, G, Rows>, rows, cols, logits,
                      Rows{row_max, row_sum, target, first, dloss}, dlogits);
}

// probs[row] = softmax(logits[row]); probs may be logits.
template <class T, class P>
void softmax_forward(cudaStream_t stream, std::int64_t rows, std::int64_t n, const T* logits, P* probs) {
  if (rows <= 0 || n <= 0) return;
  constexpr int W = common_width<T, P>;
  detail::launch_rows(stream, rows, row_vectors_fit(n, logits, static_cast<const P*>(probs)),
                      detail::softmax_kernel<W, T, P>, detail::softmax_kernel<1, T, P>, rows, n, logits, probs);
}

// losses[row] = the cross-entropy of logits[row] with class targets[row]; stats[row] saved for
// the backward (may be null when not needed).
template <class T>
void cross_entropy_forward(cudaStream_t stream, std::int64_t rows, std::int64_t n, const T* logits,
                           const std::int64_t* targets, float* losses, kernels::softmax_stats* stats) {
  if (rows <= 0 || n <= 0) return;
  constexpr int W = common_width<T>;
  detail::launch_rows(stream, rows, row_vectors_fit(n, logits), detail::cross_entropy_forward_kernel<W, T>,
                      detail::cross_entropy_forward_kernel<1, T>, rows, n, logits, targets, losses, stats);
}

// dlogits[row] = dloss[row] * (softmax(logits[row]) - onehot(targets[row])), from the forward's
// stats; dlogits may be logits.
template <class T, class G>
void cross_entropy_backward(cudaStream_t stream, std::int64_t rows, std::int64_t n, const T* logits,
                            const std::int64_t* targets, const kernels::softmax_stats* stats, const float* dloss,
                            G* dlogits) {
  if (rows <= 0 || n <= 0) return;
  constexpr int W = common_width<T, G>;
  using Rows = detail::saved_row_stats;
  detail::launch_rows(stream, rows, row_vectors_fit(n, logits, static_cast<const G*>(dlogits)),
                      detail::cross_entropy_gradient_kernel<W, T, G, Rows>,
                      detail::cross_entropy_gradient_kernel<1, T, G, Rows>, rows, n, logits,
                      Rows{targets, stats, dloss}, dlogits);
}

}  // namespace tpx::cuda

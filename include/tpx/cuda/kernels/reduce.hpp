// Reductions on the device, with the reducers of kernels/reduction.hpp (what each element
// contributes, how partial results combine, the identity), so the host tests cover the math:
//
//   sum_arrays(stream, n, inputs, out)   out[i] = sum over the arrays, in order, of inputs[a][i]:
//                                        the reduction of an unreduced tensor's partial sums
//                                        (the simulated mesh's reduce_scatter and all_reduce)
//   max_arrays(stream, n, inputs, out)   out[i] = max over the arrays of inputs[a][i], NaN if any
//                                        is NaN (the simulated mesh's all_reduce with
//                                        reduction::max)
//   reduce(stream, pool, n, x, r, out)   *out = r's fold of x[0, n): sum, sum of squares, max
//
// sum_arrays and max_arrays are one kernel templated on the reducer: it folds each element in
// fp32 over the arrays in the order given and rounds once to T, exactly as the host communicator
// does, so both give the same bits (a maximum is exact anyway). reduce folds
// in two passes: each block combines its grid-stride share with cub::BlockReduce into one
// partial, and one block combines the partials; the order differs from a serial fold, so a fp32
// sum agrees with the host's double-accumulated helpers to n * 2^-24 relative, not bit for bit.
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/kernels/launch.hpp"
#include "tpx/kernels/reduction.hpp"

namespace tpx::cuda {

// The most arrays one sum_arrays or max_arrays launch takes (their pointers travel as a kernel
// argument).
inline constexpr int max_summed_arrays = 64;

namespace detail {

template <class T>
struct array_list {
  const T* at[max_summed_arrays];
  int count;
};

// out[i] = the fold with R (an fp32 reducer) over the arrays, in order, of inputs.at[a][i],
// starting from the first array's element as the host communicator does (so a sum of -0s is -0).
template <class R, class T>
__global__ void __launch_bounds__(block_threads) reduce_arrays_kernel(std::int64_t n, array_list<T> inputs, T* out) {
  for (std::int64_t i = global_thread(); i < n; i += grid_stride()) {
    float acc = inputs.count > 0 ? R::element(static_cast<float>(inputs.at[0][i])) : R::identity();
    for (int a = 1; a < inputs.count; ++a) acc = R::combine(acc, R::element(static_cast<float>(inputs.at[a][i])));
    out[i] = static_cast<T>(acc);
  }
}

// Combines two partial results with the reducer (CUB's reduction operator).
template <class R>
struct combine_with {
  __device__ typename R::value_type operator()(typename R::value_type a, typename R::value_type b) const {
    return R::combine(a, b);
  }
};

// partials[block] = fold of this block's grid-stride share of x (elements, or already-folded
// partials when `folded`).
template <class R, bool folded, class T>
__global__ void __launch_bounds__(block_threads) reduce_kernel(std::int64_t n, const T* x, typename R::value_type* partials) {
  using Acc = typename R::value_type;
  using BlockReduce = cub::BlockReduce<Acc, block_threads>;
  __shared__ typename BlockReduce::TempStorage scratch;
  Acc acc = R::identity();
  for (std::int64_t i = global_thread(); i < n; i += grid_stride()) {
    if constexpr (folded)
      acc = R::combine(acc, x[i]);
    else
      acc = R::combine(acc, R::element(static_cast<float>(x[i])));
  }
  const Acc block = BlockReduce(scratch).Reduce(acc, combine_with<R>{});
  if (threadIdx.x == 0) partials[blockIdx.x] = block;
}

// Launches reduce_arrays_kernel<R>; `name` is the caller's, for the error message.
template <class R, class T>
void reduce_arrays(const char* name, cudaStream_t stream, std::int64_t n, std::span<const T* const> inputs, T* out) {
  if (inputs.size() > static_cast<std::size_t>(max_summed_arrays))
    throw std::invalid_argument("tpx: " + std::string(name) + ": " + std::to_string(inputs.size()) +
                                " arrays; at most " + std::to_string(max_summed_arrays) + " per call");
  if (n <= 0) return;
  array_list<T> list{};
  for (std::size_t a = 0; a < inputs.size(); ++a) list.at[a] = inputs[a];
  list.count = static_cast<int>(inputs.size());
  reduce_arrays_kernel<R><<<grid_for(n), block_threads, 0, stream>>>(n, list, out);
  TPX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail

// out[i] = sum over a of inputs[a][i], for i in [0, n); out may be one of the inputs.
template <class T>
void sum_arrays(cudaStream_t stream, std::int64_t n, std::span<const T* const> inputs, T* out) {
  detail::reduce_arrays<kernels::sum_reducer<float>>("sum_arrays", stream, n, inputs, out);
}

// out[i] = max over a of inputs[a][i] (NaN if any of them is NaN), for i in [0, n); out may be
// one of the inputs.
template <class T>
void max_arrays(cudaStream_t stream, std::int64_t n, std::span<const T* const> inputs, T* out) {
  detail::reduce_arrays<kernels::max_reducer<float>>("max_arrays", stream, n, inputs, out);
}

// *out (device memory) = the fold of x[0, n) with reducer R (kernels/reduction.hpp); scratch for
// the block partials comes from `pool`, in stream order.
template <class R, class T>
void reduce(cudaStream_t stream, cudaMemPool_t pool, std::int64_t n, const T* x, R, typename R::value_type* out) {
  using Acc = typename R::value_type;
  const unsigned blocks = grid_for(n);
  device_buffer<Acc> partials(blocks, pool, stream);
  detail::reduce_kernel<R, false><<<blocks, block_threads, 0, stream>>>(n, x, partials.data());
  TPX_CUDA_CHECK(cudaGetLastError());
  detail::reduce_kernel<R, true><<<1, block_threads, 0, stream>>>(blocks, partials.data(), out);
  TPX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tpx::cuda

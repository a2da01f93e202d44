// Elementwise kernels: out[i] = f(in[i]...) for any kernels/ functor (add, gelu, gelu_backward,
// scale, identity ...), and the row-broadcast form out[r, c] = f(in[r, c], v[c]) behind bias add.
//
// These launch the very functors the host backend applies with kernels::transform, so
// tests/unit/kernels_functors_test.cpp covers their arithmetic: each input is widened to fp32,
// f runs in fp32 and the result is rounded once to Out. When every pointer is aligned to its
// 16-byte vector, a thread loads W consecutive elements of each input as one access, with
// W = common_width (launch.hpp): 4 for fp32, 8 for all-bf16; the last n % W elements, or
// everything when a pointer is not aligned, go one by one. Memory-bound, so the only goal is
// full-width coalesced traffic (bench/cuda/kernels.cu compares them with a device memcpy).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/kernels/launch.hpp"

namespace tpx::cuda {

namespace detail {

template <int W, class Out, class F, class... In>
__global__ void __launch_bounds__(block_threads)
    transform_kernel(std::int64_t n, F f, Out* out, const In*... in) {
  const std::int64_t vectors = W > 1 ? n / W : 0;
  for (std::int64_t i = global_thread(); i < vectors; i += grid_stride()) {
    const auto loaded = [i](const auto* p) {
      using V = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
      return reinterpret_cast<const vec<V, W>*>(p)[i];
    };
    vec<Out, W> result;
    const auto apply = [&](const auto&... packs) {
#pragma unroll
      for (int j = 0; j < W; ++j) result.v[j] = static_cast<Out>(f(static_cast<float>(packs.v[j])...));
    };
    apply(loaded(in)...);
    reinterpret_cast<vec<Out, W>*>(out)[i] = result;
  }
  for (std::int64_t i = vectors * W + global_thread(); i < n; i += grid_stride())
    out[i] = static_cast<Out>(f(static_cast<float>(in[i])...));
}

template <int W, class Out, class F, class In, class Row>
__global__ void __launch_bounds__(block_threads)
    transform_rows_kernel(std::int64_t rows, std::int64_t cols, F f, Out* out,
                          const In* in, const Row* row) {
  const std::int64_t groups = cols / W;  // W divides cols when W > 1
  for (std::int64_t i = global_thread(); i < rows * groups; i += grid_stride()) {
    const std::int64_t c = (i % groups) * W;
    const vec<In, W> x = reinterpret_cast<const vec<In, W>*>(in)[i];
    const vec<Row, W> v = *reinterpret_cast<const vec<Row, W>*>(row + c);
    vec<Out, W> y;
#pragma unroll
    for (int j = 0; j < W; ++j) y.v[j] = static_cast<Out>(f(static_cast<float>(x.v[j]), static_cast<float>(v.v[j])));
    reinterpret_cast<vec<Out, W>*>(out)[i] = y;
  }
}

}  // namespace detail

// out[i] = f(in[i]...) for i in [0, n), on `stream`. out may be one of the inputs.
template <class Out, class F, class... In>
void transform(cudaStream_t stream, std::int64_t n, const F& f, Out* out, const In*... in) {
  if (n <= 0) return;
  constexpr int W = common_width<Out, In...>;
  if (vectors_fit(static_cast<const Out*>(out), in...))
    detail::transform_kernel<W><<<grid_for(n / W), block_threads, 0, stream>>>(n, f, out, in...);
  else
    detail::transform_kernel<1><<<grid_for(n), block_threads, 0, stream>>>(n, f, out, in...);
  TPX_CUDA_CHECK(cudaGetLastError());
}

// out[r, c] = f(in[r, c], row[c]) over a row-major [rows, cols] array: with kernels::add, the
// bias add of a linear layer. out may be in.
template <class Out, class F, class In, class Row>
void transform_rows(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const F& f, Out* out, const In* in,
                    const Row* row) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int W = common_width<Out, In, Row>;
  if (row_vectors_fit(cols, static_cast<const Out*>(out), in, row))
    detail::transform_rows_kernel<W><<<grid_for(rows * cols / W), block_threads, 0, stream>>>(rows, cols, f, out, in, row);
  else
    detail::transform_rows_kernel<1><<<grid_for(rows * cols), block_threads, 0, stream>>>(rows, cols, f, out, in, row);
  TPX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tpx::cuda

// copy_box on the device: tensor/box_copy.hpp's copy of a rectangular box between two row-major
// arrays, for arrays in device memory, in stream order. It is the pack/unpack of every
// collective over a dim that is not outermost, and the slice of a replicated tensor.
//
// As on the host, trailing dims that the box spans entirely in both arrays merge into one
// contiguous run. One run is a cudaMemcpyAsync; runs along one more dim are a cudaMemcpy2DAsync
// (a pitched copy); deeper boxes go to a kernel in which each thread copies whole units of a run
// by a linear index: 16-byte units when the runs, their strides and both base addresses allow,
// otherwise single elements.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/kernels/box.hpp"
#include "tpx/cuda/kernels/launch.hpp"
#include "tpx/tensor/box_copy.hpp"

namespace tpx::cuda {

namespace detail {
template <class U, std::size_t N>
__global__ void __launch_bounds__(block_threads)
    copy_box_kernel(const U* src, U* dst, strided_box<N> box) {
  const std::int64_t n = box.count();
  for (std::int64_t e = global_thread(); e < n; e += grid_stride()) {
    std::int64_t s = 0, t = 0;
    box.locate(e, s, t);
    dst[t] = src[s];
  }
}
}  // namespace detail

template <class T, std::size_t N>
void copy_box(cudaStream_t stream, const T* src, const std::array<std::int64_t, N>& src_shape,
              const std::array<std::int64_t, N>& src_start, T* dst,
              const std::array<std::int64_t, N>& dst_shape,
              const std::array<std::int64_t, N>& dst_start,
              const std::array<std::int64_t, N>& box) {
  if constexpr (N == 0) {
    TPX_CUDA_CHECK(cudaMemcpyAsync(dst, src, sizeof(T), cudaMemcpyDeviceToDevice, stream));
  } else {
    for (std::int64_t e : box)
      if (e == 0) return;
    const box_runs<N> r = runs_of_box(src_shape, src_start, dst_shape, dst_start, box);
    const std::size_t first_run_dim = r.first_run_dim;  // dims after it are spanned: one run
    const std::int64_t run = r.run;
    const std::array<std::int64_t, N>& src_stride = r.src_stride;
    const std::array<std::int64_t, N>& dst_stride = r.dst_stride;
    const T* from = src + r.src_base;
    T* to = dst + r.dst_base;
    if (first_run_dim == 0) {
      TPX_CUDA_CHECK(cudaMemcpyAsync(to, from, run * sizeof(T), cudaMemcpyDeviceToDevice, stream));
      return;
    }
    if (first_run_dim == 1) {
      TPX_CUDA_CHECK(cudaMemcpy2DAsync(to, dst_stride[0] * sizeof(T), from,
                                       src_stride[0] * sizeof(T), run * sizeof(T), box[0],
                                       cudaMemcpyDeviceToDevice, stream));
      return;
    }
    // first_run_dim < N, so boxes of one or two dims are done above and the kernel is compiled
    // only for deeper ones (compiled for N = 2 it would index geometry with first_run_dim >= 2,
    // which GCC 13 reports under -Warray-bounds).
    if constexpr (N > 2) {
      // The kernel's box: the outer dims, then the run (contiguous in both arrays), then 1s.
      detail::strided_box<N> geometry{};
      for (std::size_t d = 0; d < N; ++d) {
        geometry.extent[d] = d < first_run_dim ? box[d] : d == first_run_dim ? run : 1;
        geometry.a_stride[d] = d < first_run_dim ? src_stride[d] : 1;
        geometry.b_stride[d] = d < first_run_dim ? dst_stride[d] : 1;
      }
      constexpr std::int64_t unit = 16;
      bool wide = (run * static_cast<std::int64_t>(sizeof(T))) % unit == 0 &&
                  aligned_to(from, unit) && aligned_to(to, unit);
      for (std::size_t d = 0; d < first_run_dim; ++d)
        wide = wide && (geometry.a_stride[d] * static_cast<std::int64_t>(sizeof(T))) % unit == 0 &&
               (geometry.b_stride[d] * static_cast<std::int64_t>(sizeof(T))) % unit == 0;
      if (wide) {
        constexpr std::int64_t per_unit = unit / static_cast<std::int64_t>(sizeof(T));
        geometry.extent[first_run_dim] /= per_unit;
        for (std::size_t d = 0; d < first_run_dim; ++d) {
          geometry.a_stride[d] /= per_unit;
          geometry.b_stride[d] /= per_unit;
        }
        detail::copy_box_kernel<<<grid_for(geometry.count()), block_threads, 0, stream>>>(
            reinterpret_cast<const uint4*>(from), reinterpret_cast<uint4*>(to), geometry);
      } else {
        detail::copy_box_kernel<<<grid_for(geometry.count()), block_threads, 0, stream>>>(from, to,
                                                                                          geometry);
      }
      TPX_CUDA_CHECK(cudaGetLastError());
    }
  }
}

}  // namespace tpx::cuda

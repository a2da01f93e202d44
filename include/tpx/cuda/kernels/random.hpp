// Random initialization on the device: each element of a shard gets scale * normal_at(seed, g),
// g its global row-major index in the unsharded tensor (kernels/random.hpp), so a device tensor
// made by tpx::randn holds, element for element, what the host's holds (to a few ulps: logf,
// cosf and sqrtf are not bit-identical between glibc and CUDA), on any mesh.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/kernels/box.hpp"
#include "tpx/cuda/kernels/launch.hpp"
#include "tpx/kernels/random.hpp"

namespace tpx::cuda {

namespace detail {
template <class T, std::size_t N>
__global__ void __launch_bounds__(block_threads)
    fill_normal_kernel(T* out, strided_box<N> shard, std::uint64_t seed, float scale) {
  const std::int64_t n = shard.count();
  for (std::int64_t e = global_thread(); e < n; e += grid_stride()) {
    std::int64_t local = 0, global = 0;
    shard.locate(e, local, global);
    out[local] = static_cast<T>(scale * kernels::normal_at(seed, static_cast<std::uint64_t>(global)));
  }
}
}  // namespace detail

// out (the shard: local extents, row-major) = scale * N(0, 1) keyed by each element's global
// index: the shard starts at `offsets` in a tensor of `global` extents.
template <class T, std::size_t N>
void fill_normal(cudaStream_t stream, T* out, const std::array<std::int64_t, N>& local,
                 const std::array<std::int64_t, N>& offsets, const std::array<std::int64_t, N>& global,
                 std::uint64_t seed, float scale) {
  detail::strided_box<N> shard{};
  std::int64_t local_stride = 1, global_stride = 1;
  for (std::size_t d = N; d-- > 0;) {
    shard.extent[d] = local[d];
    shard.a_stride[d] = local_stride;
    shard.b_stride[d] = global_stride;
    shard.b_base += offsets[d] * global_stride;
    local_stride *= local[d];
    global_stride *= global[d];
  }
  if (shard.count() == 0) return;
  detail::fill_normal_kernel<<<grid_for(shard.count()), block_threads, 0, stream>>>(out, shard, seed, scale);
  TPX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tpx::cuda

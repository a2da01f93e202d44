// strided_box<N>: a box of an N-dim index space and where each of its points lies in two arrays,
// so a kernel can turn a thread's linear index into the two offsets it needs.
//
// copy_box.hpp uses it for the source and destination of a pack/unpack; random.hpp for a
// shard's local index and the element's global index in the unsharded tensor. Points are
// numbered row-major over extent[]; point (c_0 .. c_{N-1}) lies at base + sum_d c_d * stride[d]
// in each array.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpx::cuda::detail {

template <std::size_t N>
struct strided_box {
  static constexpr std::size_t slots = N > 0 ? N : 1;  // a 0-dim box is one point
  std::int64_t extent[slots];
  std::int64_t a_stride[slots], b_stride[slots];
  std::int64_t a_base = 0, b_base = 0;

  __host__ __device__ std::int64_t count() const {
    std::int64_t n = 1;
    for (std::size_t d = 0; d < N; ++d) n *= extent[d];
    return n;
  }
  // Offsets of point e in the two arrays.
  __device__ void locate(std::int64_t e, std::int64_t& a, std::int64_t& b) const {
    a = a_base;
    b = b_base;
#pragma unroll
    for (std::size_t d = N; d-- > 0;) {
      const std::int64_t c = e % extent[d];
      e /= extent[d];
      a += c * a_stride[d];
      b += c * b_stride[d];
    }
  }
};

}  // namespace tpx::cuda::detail

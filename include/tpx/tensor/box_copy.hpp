// copy_box: copy a rectangular box between two row-major arrays of the same rank.
//
// Every movement of a shard that is not a plain concatenation goes through this one function:
// packing the blocks of a dim that is not outermost before a collective, unpacking what a
// collective delivered, and taking a rank's slice of a replicated tensor. It copies whole
// contiguous runs with memcpy, merging the innermost dims whenever the box spans them fully in
// both arrays, so an outermost-dim box is a single memcpy.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tpx {

template <std::size_t N>
using index_array = std::array<std::int64_t, N>;

template <std::size_t N>
constexpr std::int64_t element_count(const index_array<N>& shape) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) n *= e;
  return n;
}

template <class T, std::size_t N>
void copy_box(const T* src, const index_array<N>& src_shape, const index_array<N>& src_start,
              T* dst, const index_array<N>& dst_shape, const index_array<N>& dst_start,
              const index_array<N>& box) {
  if constexpr (N == 0) {
    *dst = *src;
  } else {
    if (element_count(box) == 0) return;
    // Merge trailing dims that the box covers entirely in both arrays into one contiguous run.
    std::size_t first_run_dim = N - 1;
    std::int64_t run = box[N - 1];
    while (first_run_dim > 0 && box[first_run_dim] == src_shape[first_run_dim] &&
           box[first_run_dim] == dst_shape[first_run_dim]) {
      --first_run_dim;
      run *= box[first_run_dim];
    }
    index_array<N> src_stride{}, dst_stride{};
    src_stride[N - 1] = dst_stride[N - 1] = 1;
    for (std::size_t d = N - 1; d > 0; --d) {
      src_stride[d - 1] = src_stride[d] * src_shape[d];
      dst_stride[d - 1] = dst_stride[d] * dst_shape[d];
    }
    std::int64_t src_base = 0, dst_base = 0;
    for (std::size_t d = 0; d < N; ++d) {
      src_base += src_start[d] * src_stride[d];
      dst_base += dst_start[d] * dst_stride[d];
    }
    // Odometer over the dims before the run.
    index_array<N> at{};
    for (;;) {
      std::int64_t s = src_base, t = dst_base;
      for (std::size_t d = 0; d < first_run_dim; ++d) {
        s += at[d] * src_stride[d];
        t += at[d] * dst_stride[d];
      }
      std::memcpy(dst + t, src + s, static_cast<std::size_t>(run) * sizeof(T));
      std::size_t d = first_run_dim;
      while (d > 0) {
        --d;
        if (++at[d] < box[d]) break;
        at[d] = 0;
        if (d == 0) return;
      }
      if (first_run_dim == 0) return;
    }
  }
}

}  // namespace tpx

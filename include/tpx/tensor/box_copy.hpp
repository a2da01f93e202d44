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

// Where a box lies in two row-major arrays, reduced to contiguous runs: the trailing dims the box
// spans entirely in both arrays merge into one run of `run` elements that starts at dim
// `first_run_dim`; the dims before it are stepped through with the strides. Shared by the host
// copy below and the device copy (cuda/kernels/copy_box.hpp).
template <std::size_t N>
struct box_runs {
  std::size_t first_run_dim = N - 1;
  std::int64_t run = 0;
  index_array<N> src_stride{}, dst_stride{};
  std::int64_t src_base = 0, dst_base = 0;  // offsets of the box's first element
};

template <std::size_t N>
constexpr box_runs<N> runs_of_box(const index_array<N>& src_shape, const index_array<N>& src_start,
                                  const index_array<N>& dst_shape, const index_array<N>& dst_start,
                                  const index_array<N>& box) {
  box_runs<N> r;
  r.run = box[N - 1];
  while (r.first_run_dim > 0 && box[r.first_run_dim] == src_shape[r.first_run_dim] &&
         box[r.first_run_dim] == dst_shape[r.first_run_dim]) {
    --r.first_run_dim;
    r.run *= box[r.first_run_dim];
  }
  r.src_stride[N - 1] = r.dst_stride[N - 1] = 1;
  for (std::size_t d = N - 1; d > 0; --d) {
    r.src_stride[d - 1] = r.src_stride[d] * src_shape[d];
    r.dst_stride[d - 1] = r.dst_stride[d] * dst_shape[d];
  }
  for (std::size_t d = 0; d < N; ++d) {
    r.src_base += src_start[d] * r.src_stride[d];
    r.dst_base += dst_start[d] * r.dst_stride[d];
  }
  return r;
}

template <class T, std::size_t N>
void copy_box(const T* src, const index_array<N>& src_shape, const index_array<N>& src_start,
              T* dst, const index_array<N>& dst_shape, const index_array<N>& dst_start,
              const index_array<N>& box) {
  if constexpr (N == 0) {
    *dst = *src;
  } else {
    if (element_count(box) == 0) return;
    const box_runs<N> r = runs_of_box(src_shape, src_start, dst_shape, dst_start, box);
    // Odometer over the dims before the run.
    index_array<N> at{};
    for (;;) {
      std::int64_t s = r.src_base, t = r.dst_base;
      for (std::size_t d = 0; d < r.first_run_dim; ++d) {
        s += at[d] * r.src_stride[d];
        t += at[d] * r.dst_stride[d];
      }
      std::memcpy(dst + t, src + s, static_cast<std::size_t>(r.run) * sizeof(T));
      std::size_t d = r.first_run_dim;
      while (d > 0) {
        --d;
        if (++at[d] < box[d]) break;
        at[d] = 0;
        if (d == 0) return;
      }
      if (r.first_run_dim == 0) return;
    }
  }
}

}  // namespace tpx

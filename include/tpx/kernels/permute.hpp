// permute_into: the per-element math of a local transpose, copying a row-major block into another
// row-major block that stores the same dims in another order.
//
// einsum (ops/einsum.hpp) reads each operand as a stack of matrices, [batch dims..., then the
// matrix's dims]; an operand stored in another order (the batch dims not leading, a free dim
// between two contracted ones) is first copied into that layout with this functor. It is a
// function of a grid position (r, c) of the destination, r running over every destination dim
// but the last and c over the last, so a memory space runs it with its for_each_element loop
// (tensor/host_space.hpp's plain loop on the host, cuda/kernels/grid.hpp's kernel on the GPU):
// one definition of the index arithmetic for both. It holds raw pointers into one memory space and
// is copied by value into a kernel. Both spaces recognise it (is_permute_into_v) and copy whole
// rows instead of calling it per element: the GPU in 16-byte vectors (cuda/kernels/grid.hpp), the
// host row by row with copy_rows, whose rows' sources advance like an odometer. Called per
// element, the host loop paid a division per dim for every element; the GPT's reference attention
// spent a quarter of its host step there.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tpx/core/config.hpp"

namespace tpx::kernels {

template <class T>
struct permute_into {
  static constexpr int capacity = 8;
  const T* src = nullptr;
  T* dst = nullptr;
  int ndims = 0;                        // of both blocks, at least 1
  std::int64_t extent[capacity]{};      // dst's extents, in dst's order
  std::int64_t src_stride[capacity]{};  // the stride, in src, of dst's dim d

  // The copy of src, a row-major block of `ndims` dims with these extents, into dst in the
  // order `order` (dst dim i is src dim order[i]).
  static permute_into of(const T* src, const std::int64_t* src_extent, int ndims, const int* order,
                         T* dst) {
    permute_into f;
    f.src = src;
    f.dst = dst;
    f.ndims = ndims;
    std::int64_t stride[capacity]{};
    stride[ndims - 1] = 1;
    for (int d = ndims - 1; d > 0; --d) stride[d - 1] = stride[d] * src_extent[d];
    for (int i = 0; i < ndims; ++i) {
      f.extent[i] = src_extent[order[i]];
      f.src_stride[i] = stride[order[i]];
    }
    return f;
  }

  // dst[r, c] (r the row-major index over dst's dims but the last) = src at the same coordinates.
  TPX_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    dst[r * extent[ndims - 1] + c] = src[source_of_row(r) + c * src_stride[ndims - 1]];
  }

  // Where dst's row r starts in src: the row's coordinates, one division per dim.
  TPX_HOST_DEVICE std::int64_t source_of_row(std::int64_t r) const {
    std::int64_t at = 0;
    for (int d = ndims - 2; d >= 0; --d) {
      at += (r % extent[d]) * src_stride[d];
      r /= extent[d];
    }
    return at;
  }

  // Whether the last dim stays last (attention's [B, T, H, E] <-> [B, H, T, E]): then each row
  // of dst is one contiguous run of src, and the GPU copies it in vectors, finding where it
  // starts once per vector instead of once per element (cuda/kernels/grid.hpp).
  TPX_HOST_DEVICE bool keeps_last_dim() const { return src_stride[ndims - 1] == 1; }

  // The whole copy on the host, dst's `rows` rows in order: each row's start in src follows from
  // the last one's by carrying through dst's dims (no division), and a row whose last dim stays
  // last is one contiguous run of src.
  void copy_rows(std::int64_t rows) const {
    const std::int64_t cols = extent[ndims - 1], stride = src_stride[ndims - 1];
    std::int64_t coordinate[capacity]{};
    std::int64_t at = 0;  // source_of_row(r)
    for (std::int64_t r = 0; r < rows; ++r) {
      T* row = dst + r * cols;
      if (stride == 1)
        std::copy_n(src + at, cols, row);
      else
        for (std::int64_t c = 0; c < cols; ++c) row[c] = src[at + c * stride];
      for (int d = ndims - 2; d >= 0; --d) {  // to row r + 1
        at += src_stride[d];
        if (++coordinate[d] < extent[d]) break;
        at -= src_stride[d] * extent[d];
        coordinate[d] = 0;
      }
    }
  }
};

template <class Fn>
inline constexpr bool is_permute_into_v = false;
template <class T>
inline constexpr bool is_permute_into_v<permute_into<T>> = true;

}  // namespace tpx::kernels

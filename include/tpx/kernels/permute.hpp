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
// is copied by value into a kernel.
#pragma once

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
};

}  // namespace tpx::kernels

// Shape<B<>, D<>>: a tensor's global extents, written with its dims' names.
//
// `{B(8), D(16)}` converts to Shape<B<>, D<>> and nothing else converts, so a caller cannot
// pass the extents of a [B, D] tensor in [D, B] order by accident.
#pragma once

#include <array>
#include <cstdint>

#include "tpx/sharding/dim.hpp"

namespace tpx {

template <Dim... Dims>
struct Shape {
  std::array<std::int64_t, sizeof...(Dims)> extents{};

  constexpr Shape(Dims... dims) : extents{dims.extent...} {}  // NOLINT: {B(8), D(16)}
  explicit constexpr Shape(const std::array<std::int64_t, sizeof...(Dims)>& e) : extents(e) {}
};

}  // namespace tpx

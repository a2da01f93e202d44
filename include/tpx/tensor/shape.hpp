// Shape<B<>, D<>>: a tensor's global extents, written with its dims' names.
//
// `{B(8), D(16)}` converts to Shape<B<>, D<>> and nothing else converts, so a caller cannot
// pass the extents of a [B, D] tensor in [D, B] order by accident. detail::extents_text writes
// extents as the error messages quote them, "[8, 16]".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "tpx/sharding/dim.hpp"

namespace tpx {

template <Dim... Dims>
struct Shape {
  std::array<std::int64_t, sizeof...(Dims)> extents{};

  constexpr Shape(Dims... dims) : extents{dims.extent...} {}  // NOLINT: {B(8), D(16)}
  explicit constexpr Shape(const std::array<std::int64_t, sizeof...(Dims)>& e) : extents(e) {}
};

namespace detail {

// "[8, 16, 64]"
template <class Extents>
std::string extents_text(const Extents& extents) {
  std::string text = "[";
  for (std::size_t i = 0; i < extents.size(); ++i) {
    if (i != 0) text += ", ";
    text += std::to_string(extents[i]);
  }
  return text + "]";
}

}  // namespace detail

}  // namespace tpx

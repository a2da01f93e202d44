// Looking at a tensor, for tests and debugging: what it is, which block this rank holds, and
// its elements by global coordinates.
//
//   std::cout << t;     // or tpx::describe(t):
//   // [B_X, D_Y] float: global (B=8, D=16); rank 3 holds B[4:8], D[8:16] (4x8 = 32 elements):
//   //   0.497 -0.138 0.648 1.52 -0.234 -0.234 1.58 0.767 ...
//   std::optional<float> v = tpx::at(t, {5, 9});   // element (5, 9) if this rank holds it
//
// Both are local: no communication. Elements are shown (and at() exists) only for tensors the
// host can read (host_accessible_v); a device tensor is described by its type and block alone,
// since reading it would be a device->host copy that tpx only makes when it is spelled
// (tensor/staging.hpp). A partial sum ({U_X}) shows, and at() returns, this rank's partial value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tpx/core/bfloat16.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

namespace detail {
template <class T>
constexpr const char* element_type_name() {
  if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else if constexpr (std::is_same_v<T, bf16>)
    return "bf16";
  else
    return "?";
}
}  // namespace detail

// "[B_X, D_Y] float: global (B=8, D=16); rank 3 holds B[4:8], D[8:16] (4x8 = 32 elements): ..."
// with at most `max_elements` of this rank's elements, row-major, for host-accessible tensors.
template <AnyTensor Tn>
std::string describe(const Tn& t, std::size_t max_elements = 8) {
  using dims = typename Tn::dims;
  std::ostringstream out;
  out << Tn::notation.c_str() << ' ' << detail::element_type_name<typename Tn::value_type>()
      << ": global (";
  [&]<std::size_t... D>(std::index_sequence<D...>) {
    ((out << (D == 0 ? "" : ", ") << type_at_t<D, dims>::name.c_str() << '='
          << t.global_extent(D)),
     ...);
    out << "); rank " << t.context().world_rank() << " holds ";
    ((out << (D == 0 ? "" : ", ") << type_at_t<D, dims>::name.c_str() << '['
          << t.local_offset(D) << ':' << t.local_offset(D) + t.local_extent(D) << ']'),
     ...);
    out << " (";
    ((out << (D == 0 ? "" : "x") << t.local_extent(D)), ...);
  }(std::make_index_sequence<Tn::order>{});
  out << (Tn::order == 0 ? "" : " = ") << t.size() << " elements)";
  if constexpr (host_accessible_v<typename Tn::space>) {
    const auto local = t.local();
    const std::size_t shown = local.size() < max_elements ? local.size() : max_elements;
    if (shown > 0) out << ':';
    for (std::size_t i = 0; i < shown; ++i) out << ' ' << static_cast<float>(local[i]);
    if (shown < local.size()) out << " ...";
  }
  return out.str();
}

template <AnyTensor Tn>
std::ostream& operator<<(std::ostream& os, const Tn& t) {
  return os << describe(t);
}

// Element `global` (global coordinates, in the tensor's dim order) if this rank holds it, else
// nullopt. Coordinates outside the global shape throw std::out_of_range.
template <AnyTensor Tn>
requires host_accessible_v<typename Tn::space>
std::optional<typename Tn::value_type> at(const Tn& t,
                                          const index_array<Tn::order>& global) {
  std::int64_t flat = 0;
  bool held = true;
  for (std::size_t d = 0; d < Tn::order; ++d) {
    if (global[d] < 0 || global[d] >= t.global_extent(d))
      throw std::out_of_range("tpx: at: coordinate " + std::to_string(global[d]) + " of dim " +
                              std::to_string(d) + " of " + std::string(Tn::notation.c_str()) +
                              " is outside its extent " + std::to_string(t.global_extent(d)));
    const std::int64_t local = global[d] - t.local_offset(d);
    held = held && local >= 0 && local < t.local_extent(d);
    flat = flat * t.local_extent(d) + local;
  }
  if (!held) return std::nullopt;
  return t.local()[static_cast<std::size_t>(flat)];
}

}  // namespace tpx

// Logical dims: the named axes of a tensor (the notes' B, D, F), each split over mesh axes.
//
// `TPX_DIMS(B, D)` declares two class templates. `B<X>` is "dim B split over mesh axis X" (the
// notes' B_X), `B<X, Y>` is B_XY (split over X, then each piece over Y), and `B<>` is B
// unsplit. A dim is also a value: `B(8)` is dim B with global extent 8, which is how global
// shapes are written (`{B(8), D(16)}`), so a shape cannot list its extents in the wrong order.
#pragma once

#include <concepts>
#include <cstdint>
#include <type_traits>

#include "tpx/core/compile_error.hpp"
#include "tpx/core/fixed_string.hpp"
#include "tpx/core/for_each_macro.hpp"
#include "tpx/core/type_list.hpp"
#include "tpx/sharding/mesh_axis.hpp"

namespace tpx {

struct dim_tag {};

template <fixed_string Name, template <class...> class Family, class... Axes>
struct dim_base : dim_tag {
  static_assert((MeshAxis<Axes> && ...),
                "tpx: a dim is split over mesh axes only (types declared by TPX_MESH_AXES)");
  static constexpr auto name = Name;
  using axes = type_list<Axes...>;
  // The same dim split over other axes: B<X>::with_axes<Y> is B<Y>.
  template <class... Others>
  using with_axes = Family<Others...>;

  std::int64_t extent = 0;  // global extent, when the dim is used as a value
};

template <class T>
concept Dim = std::derived_from<T, dim_tag>;

// The dim with no split: the identity of a dim, whatever its sharding.
template <Dim D>
using unsplit_t = typename D::template with_axes<>;

template <class A, class B>
inline constexpr bool same_dim_v = std::is_same_v<unsplit_t<A>, unsplit_t<B>>;

}  // namespace tpx

#define TPX_DETAIL_DIM(Name)                                                          \
  template <class... Axes>                                                            \
  struct Name : ::tpx::dim_base<#Name, Name, Axes...> {                               \
    constexpr Name() = default;                                                       \
    constexpr Name(std::int64_t global_extent) { this->extent = global_extent; }      \
  };

// TPX_DIMS(B, D, F): declares the dim templates B, D and F in the current namespace.
#define TPX_DIMS(...) TPX_DETAIL_FOR_EACH(TPX_DETAIL_DIM, __VA_ARGS__)

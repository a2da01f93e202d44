// Type-level edits of a sharding: what each collective does to a tensor's type.
//
// all_gather<X> removes X from the dim it splits, reduce_scatter<X, D> moves X from the
// unreduced set onto dim D, and so on; ops/collectives.hpp composes these. Dims are found by
// identity (B<X> and B<> are the same dim), never by position, so user code names dims, not
// indices.
#pragma once

#include <type_traits>

#include "tpx/core/type_list.hpp"
#include "tpx/sharding/dim.hpp"
#include "tpx/sharding/sharding.hpp"

namespace tpx {

namespace detail {
template <class Target, class... Dims>
constexpr int dim_position() {
  int i = 0, found = -1;
  ((same_dim_v<Target, Dims> ? (found = i, ++i) : ++i), ...);
  return found;
}
}  // namespace detail

// Position of dim D (any split) in a list of dims, or -1.
template <class D, class Dims>
inline constexpr int dim_position_v = -1;
template <class D, class... Dims>
inline constexpr int dim_position_v<D, type_list<Dims...>> = detail::dim_position<D, Dims...>();

template <class D, class Axes>
struct with_axes_list;
template <class D, class... Axes>
struct with_axes_list<D, type_list<Axes...>> {
  using type = typename D::template with_axes<Axes...>;
};

template <class A, Dim D>
using without_axis_t =
    typename with_axes_list<D, remove_all_t<typename D::axes, type_list<A>>>::type;
template <class A, Dim D>
using with_axis_appended_t =
    typename with_axes_list<D, concat_t<typename D::axes, type_list<A>>>::type;

// Dims with every dim the same as Old replaced by New.
template <class Dims, class Old, class New>
struct replace_dim;
template <class... Dims, class Old, class New>
struct replace_dim<type_list<Dims...>, Old, New> {
  using type = type_list<std::conditional_t<same_dim_v<Dims, Old>, New, Dims>...>;
};
template <class Dims, class Old, class New>
using replace_dim_t = typename replace_dim<Dims, Old, New>::type;

// Dims with every split removed: the replicated layout.
template <class Dims>
struct remove_all_axes;
template <class... Dims>
struct remove_all_axes<type_list<Dims...>> {
  using type = type_list<unsplit_t<Dims>...>;
};

// Unreduced<Axes...> of a type_list of axes.
template <class Axes>
struct as_unreduced;
template <class... Axes>
struct as_unreduced<type_list<Axes...>> {
  using type = Unreduced<Axes...>;
};
template <class Axes>
using as_unreduced_t = typename as_unreduced<Axes>::type;

template <class Unred, class A>
struct unreduced_without;
template <class... Axes, class A>
struct unreduced_without<unreduced_over<Axes...>, A> {
  using type = as_unreduced_t<remove_all_t<type_list<Axes...>, type_list<A>>>;
};
template <class Unred, class A>
using unreduced_without_t = typename unreduced_without<Unred, A>::type;

// The union of Unreduced sets.
template <class... Unreds>
using unreduced_union_t = as_unreduced_t<unique_t<concat_t<typename Unreds::axes...>>>;

}  // namespace tpx

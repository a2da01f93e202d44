// type_list and the few compile-time list operations tpx needs.
//
// Shardings are small lists (a tensor has a handful of dims, a mesh a handful of axes), so the
// operations here are plain fold expressions over packs: O(1) template instantiations per query
// rather than recursive metafunctions, which keeps the compile time of user code low.
#pragma once

#include <cstddef>
#include <type_traits>

namespace tpx {

template <class... Ts>
struct type_list {
  static constexpr std::size_t size = sizeof...(Ts);
};

template <class T, class List>
inline constexpr bool contains_v = false;
template <class T, class... Ts>
inline constexpr bool contains_v<T, type_list<Ts...>> = (std::is_same_v<T, Ts> || ...);

namespace detail {
template <class T, class... Ts>
constexpr int index_of() {
  int i = 0;
  int found = -1;
  ((std::is_same_v<T, Ts> ? (found = found < 0 ? i : found, ++i) : ++i), ...);
  return found;
}
}  // namespace detail

// Position of T in List, or -1.
template <class T, class List>
inline constexpr int index_of_v = -1;
template <class T, class... Ts>
inline constexpr int index_of_v<T, type_list<Ts...>> = detail::index_of<T, Ts...>();

template <std::size_t I, class List>
struct type_at;
template <std::size_t I, class T, class... Ts>
struct type_at<I, type_list<T, Ts...>> : type_at<I - 1, type_list<Ts...>> {};
template <class T, class... Ts>
struct type_at<0, type_list<T, Ts...>> {
  using type = T;
};
template <std::size_t I, class List>
using type_at_t = typename type_at<I, List>::type;

template <class... Lists>
struct concat;
template <>
struct concat<> {
  using type = type_list<>;
};
template <class... As>
struct concat<type_list<As...>> {
  using type = type_list<As...>;
};
template <class... As, class... Bs, class... Rest>
struct concat<type_list<As...>, type_list<Bs...>, Rest...>
    : concat<type_list<As..., Bs...>, Rest...> {};
template <class... Lists>
using concat_t = typename concat<Lists...>::type;

// List without the elements of Removed (order kept).
template <class List, class Removed>
struct remove_all;
template <class... Ts, class Removed>
struct remove_all<type_list<Ts...>, Removed> {
  using type = concat_t<std::conditional_t<contains_v<Ts, Removed>, type_list<>, type_list<Ts>>...>;
};
template <class List, class Removed>
using remove_all_t = typename remove_all<List, Removed>::type;

// List with duplicates removed, first occurrence kept.
template <class List, class Seen = type_list<>>
struct unique;
template <class Seen>
struct unique<type_list<>, Seen> {
  using type = Seen;
};
template <class T, class... Ts, class... Seen>
struct unique<type_list<T, Ts...>, type_list<Seen...>>
    : unique<type_list<Ts...>, std::conditional_t<contains_v<T, type_list<Seen...>>,
                                                  type_list<Seen...>, type_list<Seen..., T>>> {};
template <class List>
using unique_t = typename unique<List>::type;

template <class T>
inline constexpr bool always_false_v = false;

}  // namespace tpx

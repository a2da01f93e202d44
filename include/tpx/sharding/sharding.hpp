// A tensor's sharding as a type: its dims in memory order, each split over mesh axes, plus the
// mesh axes over which it is unreduced.
//
// `Tensor<float, B<X>, D<Y>>` is the notes' In[B_X, D_Y]; `Tensor<float, I<>, K<>, Unreduced<X>>`
// is C[I, K]{U_X}: every rank along X holds a partial sum and the true value is their sum.
// This header parses such argument lists, checks them (a mesh axis may shard one dim once, and
// an unreduced axis shards nothing), and prints them in the notes' notation. Checks report the
// first problem through compile_error, naming the dims and axes.
//
// The checks and the planners of reshard and matmul work on `sharding_desc`, a plain constexpr
// value (dims and axes as small integer ids), rather than on types: loops over arrays are
// easier to read, and cheaper to compile, than recursive templates.
#pragma once

#include <cstddef>
#include <utility>

#include "tpx/core/compile_error.hpp"
#include "tpx/core/fixed_string.hpp"
#include "tpx/core/type_list.hpp"
#include "tpx/sharding/dim.hpp"
#include "tpx/sharding/mesh_axis.hpp"

namespace tpx {

// The set of mesh axes over which a tensor is unreduced (a partial sum), always in one order,
// by name: a partial sum over {X, Y} is one thing, whatever order it was written or produced in.
// Programs name it through the alias Unreduced below, which sorts: Unreduced<Y, X> and
// Unreduced<X, Y> are both unreduced_over<X, Y>, so tensor types that differ only in that order
// are one type, and every op's result is spelled the same way.
template <MeshAxis... Axes>
struct unreduced_over {
  using axes = type_list<Axes...>;
};

namespace detail {
template <class... Axes>
constexpr auto axis_name_order() {
  constexpr std::size_t n = sizeof...(Axes);
  const char* names[n + 1] = {Axes::name.c_str()..., ""};
  struct result {
    std::size_t at[n + 1];
  } sorted{};
  for (std::size_t i = 0; i < n; ++i) sorted.at[i] = i;
  auto before = [&](std::size_t a, std::size_t b) {  // names[a] < names[b]
    const char* x = names[a];
    const char* y = names[b];
    while (*x != '\0' && *x == *y) ++x, ++y;
    return static_cast<unsigned char>(*x) < static_cast<unsigned char>(*y);
  };
  for (std::size_t i = 1; i < n; ++i)  // insertion sort: stable, and n is a handful
    for (std::size_t j = i; j > 0 && before(sorted.at[j], sorted.at[j - 1]); --j) {
      const std::size_t t = sorted.at[j];
      sorted.at[j] = sorted.at[j - 1];
      sorted.at[j - 1] = t;
    }
  return sorted;
}

template <class Axes, class Indices>
struct sorted_unreduced;
template <class... Axes, std::size_t... I>
struct sorted_unreduced<type_list<Axes...>, std::index_sequence<I...>> {
  static constexpr auto order = axis_name_order<Axes...>();
  using type = unreduced_over<type_at_t<order.at[I], type_list<Axes...>>...>;
};
}  // namespace detail

// Unreduced<X, Y>: the notes' {U_XY}, as the last argument of a tensor type.
template <MeshAxis... Axes>
using Unreduced = typename detail::sorted_unreduced<type_list<Axes...>,
                                                    std::index_sequence_for<Axes...>>::type;

namespace detail {
template <class Dims, class Args>
struct split_spec;
template <class... Dims>
struct split_spec<type_list<Dims...>, type_list<>> {
  using dims = type_list<Dims...>;
  using unreduced = Unreduced<>;
};
template <class... Dims, class... Axes>
struct split_spec<type_list<Dims...>, type_list<unreduced_over<Axes...>>> {
  using dims = type_list<Dims...>;
  using unreduced = unreduced_over<Axes...>;
};
template <class... Dims, class Next, class... Rest>
struct split_spec<type_list<Dims...>, type_list<Next, Rest...>>
    : split_spec<type_list<Dims..., Next>, type_list<Rest...>> {
  static_assert(Dim<Next>, "tpx: a tensor lists dims (declared by TPX_DIMS), then optionally "
                           "Unreduced<Axes...> last");
};
}  // namespace detail

inline constexpr int max_dims = 8;
inline constexpr int max_axes = 8;

// A sharding as numbers: dims by name, axes by their index in some universe of axis types.
struct sharding_desc {
  int ndims = 0;
  const char* dim_name[max_dims]{};
  int n_axes[max_dims]{};
  int axis[max_dims][max_axes]{};
  int n_unreduced = 0;
  int unreduced[max_axes]{};

  constexpr bool dim_has_axis(int d, int a) const {
    for (int i = 0; i < n_axes[d]; ++i)
      if (axis[d][i] == a) return true;
    return false;
  }
  constexpr bool is_unreduced(int a) const {
    for (int i = 0; i < n_unreduced; ++i)
      if (unreduced[i] == a) return true;
    return false;
  }
  // The dim that axis a splits, or -1.
  constexpr int dim_of_axis(int a) const {
    for (int d = 0; d < ndims; ++d)
      if (dim_has_axis(d, a)) return d;
    return -1;
  }
  constexpr bool uses_axis(int a) const { return dim_of_axis(a) >= 0 || is_unreduced(a); }
  constexpr int dim_named(const char* name) const {
    for (int d = 0; d < ndims; ++d)
      if (same_name(dim_name[d], name)) return d;
    return -1;
  }
  static constexpr bool same_name(const char* a, const char* b) {
    while (*a != '\0' && *a == *b) ++a, ++b;
    return *a == *b;
  }
};

// The parsed form of Tensor's argument list.
template <class... Args>
struct sharding_of {
  using dims = typename detail::split_spec<type_list<>, type_list<Args...>>::dims;
  using unreduced = typename detail::split_spec<type_list<>, type_list<Args...>>::unreduced;
};

template <class Dims, class Unred>
struct sharding_parts;
template <class... Dims, class... Unred>
struct sharding_parts<type_list<Dims...>, unreduced_over<Unred...>> {
  using axes = concat_t<typename Dims::axes..., type_list<Unred...>>;

  // Axes are numbered by their position in Universe.
  template <class Universe>
  static constexpr sharding_desc describe() {
    sharding_desc s;
    s.ndims = sizeof...(Dims);
    int d = 0;
    ((s.dim_name[d] = Dims::name.c_str(), add_axes(s, d, typename Dims::axes{}, Universe{}), ++d),
     ...);
    ((s.unreduced[s.n_unreduced++] = index_of_v<Unred, Universe>), ...);
    return s;
  }

 private:
  template <class... As, class Universe>
  static constexpr void add_axes(sharding_desc& s, int d, type_list<As...>, Universe) {
    ((s.axis[d][s.n_axes[d]++] = index_of_v<As, Universe>), ...);
  }
};

// Names of the axes of a universe, indexed like sharding_desc's axis ids.
template <class Universe>
struct axis_names;
template <class... Axes>
struct axis_names<type_list<Axes...>> {
  static constexpr const char* value[sizeof...(Axes) + 1] = {Axes::name.c_str()..., ""};
};

// Appends the notes' notation of s to out: "[B_X, D_Y]{U_X}", "[I, K_XY]".
template <std::size_t N, class Universe>
constexpr void append_notation(static_string<N>& out, const sharding_desc& s, Universe) {
  const auto& names = axis_names<Universe>::value;
  out += "[";
  for (int d = 0; d < s.ndims; ++d) {
    if (d > 0) out += ", ";
    out += s.dim_name[d];
    if (s.n_axes[d] > 0) out += "_";
    for (int i = 0; i < s.n_axes[d]; ++i) out += names[s.axis[d][i]];
  }
  out += "]";
  if (s.n_unreduced > 0) {
    out += "{U_";
    for (int i = 0; i < s.n_unreduced; ++i) out += names[s.unreduced[i]];
    out += "}";
  }
}

// The first reason why s is not a valid sharding, or "".
template <class Universe>
constexpr static_string<200> sharding_problem(const sharding_desc& s) {
  const auto& names = axis_names<Universe>::value;
  static_string<200> why;
  auto start = [&] {
    why += "tpx: tensor ";
    append_notation(why, s, Universe{});
    why += ": ";
  };
  for (int d = 0; d < s.ndims; ++d)
    for (int e = d + 1; e < s.ndims; ++e)
      if (sharding_desc::same_name(s.dim_name[d], s.dim_name[e])) {
        start();
        why += "dim ";
        why += s.dim_name[d];
        why += " appears twice";
        return why;
      }
  for (int d = 0; d < s.ndims; ++d)
    for (int i = 0; i < s.n_axes[d]; ++i) {
      const int a = s.axis[d][i];
      for (int j = i + 1; j < s.n_axes[d]; ++j)
        if (s.axis[d][j] == a) {
          start();
          why += "mesh axis ";
          why += names[a];
          why += " splits dim ";
          why += s.dim_name[d];
          why += " twice";
          return why;
        }
      for (int e = d + 1; e < s.ndims; ++e)
        if (s.dim_has_axis(e, a)) {
          start();
          why += "mesh axis ";
          why += names[a];
          why += " shards both dim ";
          why += s.dim_name[d];
          why += " and dim ";
          why += s.dim_name[e];
          why += " (an axis can shard one dim only)";
          return why;
        }
      if (s.is_unreduced(a)) {
        start();
        why += "mesh axis ";
        why += names[a];
        why += " shards dim ";
        why += s.dim_name[d];
        why += " and is also unreduced";
        return why;
      }
    }
  for (int i = 0; i < s.n_unreduced; ++i)
    for (int j = i + 1; j < s.n_unreduced; ++j)
      if (s.unreduced[i] == s.unreduced[j]) {
        start();
        why += "mesh axis ";
        why += names[s.unreduced[i]];
        why += " is listed twice in Unreduced";
        return why;
      }
  return why;
}

// Everything about one argument list of Tensor, for the rest of tpx.
template <class... Args>
struct sharding_traits {
  using dims = typename sharding_of<Args...>::dims;
  using unreduced = typename sharding_of<Args...>::unreduced;
  using parts = sharding_parts<dims, unreduced>;
  using axes = unique_t<typename parts::axes>;  // every mesh axis the tensor mentions
  static constexpr sharding_desc desc = parts::template describe<axes>();
  static constexpr auto notation = freeze<[] {
    static_string<160> text;
    append_notation(text, desc, axes{});
    return text;
  }>();
  static constexpr auto problem = freeze<[] { return sharding_problem<axes>(desc); }>();
  static constexpr bool valid = problem.size() == 0;
};

template <class... Args>
inline constexpr bool is_valid_sharding_v = sharding_traits<Args...>::valid;

}  // namespace tpx

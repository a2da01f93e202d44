// Making tensors: each rank builds only its own block, from the global definition of the
// tensor.
//
//   auto in = tpx::randn<float, B<X>, D<Y>>(rank, {B(8), D(16)}, /*seed*/ 1);
//
// Element (b, d) of `in` is the same number whatever the mesh and sharding, because random
// values come from a counter-based generator keyed by (seed, global index) (kernels/random.hpp),
// not from per-rank generator state. That is tpx's answer to "per-rank varying" data: there is
// no varying state to track, so sharded runs are comparable with the one-rank run element by
// element, and tpx needs no type for values that differ per rank without being shards.
// Unreduced tensors cannot be made this way (their elements have no single value); they come
// from products (matmul) or from embed.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "tpx/core/compile_error.hpp"
#include "tpx/kernels/random.hpp"
#include "tpx/spmd/rank_context.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

namespace detail {
// Compile-time checks of a tensor made for a rank: every axis is one of its mesh's, and the
// tensor is not unreduced.
template <class R, class Tn>
constexpr void check_factory() {
  static_assert(std::is_base_of_v<rank_context, R>, "tpx: tensors are made for a rank");
  if constexpr (!std::is_same_v<typename Tn::unreduced, Unreduced<>>)
    compile_error<"tpx: tensor " + Tn::notation +
                  ": a factory makes replicated or sharded tensors, not partial sums">{};
  if constexpr (requires { typename R::mesh_type; })
    [&]<class... Axes>(type_list<Axes...>) {
      (R::mesh_type::template index_of<Axes>(), ...);
    }(typename Tn::traits::axes{});
}
}  // namespace detail

// The tensor whose element at global row-major index i is value_at(i), on this rank.
template <class T, class... Spec, class R, class Fn>
Tensor<T, Spec...> generate(const R& rank, const typename Tensor<T, Spec...>::shape_type& shape,
                            Fn&& value_at) {
  using Tn = Tensor<T, Spec...>;
  detail::check_factory<R, Tn>();
  Tn t(rank, shape);
  constexpr std::size_t n = Tn::order;
  if (t.size() == 0) return t;
  index_array<n> global_stride{};
  global_stride[n - 1] = 1;
  for (std::size_t d = n - 1; d > 0; --d)
    global_stride[d - 1] = global_stride[d] * t.global_extent(d);
  index_array<n> at{};
  for (T& x : t.local()) {
    std::int64_t g = 0;
    for (std::size_t d = 0; d < n; ++d) g += (t.local_offset(d) + at[d]) * global_stride[d];
    x = static_cast<T>(value_at(g));
    for (std::size_t d = n; d-- > 0;) {
      if (++at[d] < t.local_extent(d)) break;
      at[d] = 0;
    }
  }
  return t;
}

// Normal(0, 1) entries (times scale), the same at each global index on any mesh.
template <class T, class... Spec, class R>
Tensor<T, Spec...> randn(const R& rank, const typename Tensor<T, Spec...>::shape_type& shape,
                         std::uint64_t seed, float scale = 1.0f) {
  return generate<T, Spec...>(rank, shape, [&](std::int64_t i) {
    return scale * kernels::normal_at(seed, static_cast<std::uint64_t>(i));
  });
}

template <class T, class... Spec, class R>
Tensor<T, Spec...> zeros(const R& rank, const typename Tensor<T, Spec...>::shape_type& shape) {
  using Tn = Tensor<T, Spec...>;
  detail::check_factory<R, Tn>();
  return Tn(rank, shape);
}

// This rank's block of a global row-major array that every rank holds.
template <class T, class... Spec, class R>
Tensor<T, Spec...> from_global(const R& rank, const typename Tensor<T, Spec...>::shape_type& shape,
                               std::span<const T> global) {
  using Tn = Tensor<T, Spec...>;
  detail::check_factory<R, Tn>();
  Tn t(rank, shape);
  if (static_cast<std::int64_t>(global.size()) != element_count(t.global_extents()))
    throw std::invalid_argument("tpx: from_global: tensor " + std::string(Tn::notation.c_str()) +
                                " has " + std::to_string(element_count(t.global_extents())) +
                                " elements but the array has " + std::to_string(global.size()));
  copy_box(global.data(), t.global_extents(), t.local_offsets(), t.data(), t.local_extents(), {},
           t.local_extents());
  return t;
}

}  // namespace tpx

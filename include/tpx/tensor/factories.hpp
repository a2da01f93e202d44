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
//
// The tensor lives in the rank's memory space: a rank that declares `using space = ...` (a CUDA
// rank: cuda/device_rank.hpp) gets tensors of that space, any other rank host tensors, so the
// same generic code `[](auto& rank) { auto in = tpx::randn<...>(rank, ...); }` runs on both.
// Other spaces are filled on the host and copied over (from_host), except randn, which a space
// may generate in place (a static fill_normal, as the device space does).
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tpx/core/compile_error.hpp"
#include "tpx/kernels/random.hpp"
#include "tpx/spmd/rank_context.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

// The memory space of the tensors a rank makes: R::space when R names one, else host memory.
// R may be a reference (space_of_t<decltype(rank)> for an `auto& rank`): read as the rank it
// refers to, not as a type without a space, which would give a CUDA rank host tensors.
template <class R>
struct space_of {
  using type = host_space;
};
template <class R>
requires requires { typename std::remove_cvref_t<R>::space; }
struct space_of<R> {
  using type = typename std::remove_cvref_t<R>::space;
};
template <class R>
using space_of_t = typename space_of<R>::type;

// The tensor type a factory returns for rank type R.
template <class R, class T, class... Spec>
using rank_tensor_t = BasicTensor<space_of_t<R>, T, Spec...>;

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

// Overwrites this rank's block of t with value_at(i), i the global row-major index.
template <AnyTensor Tn, class Fn>
void fill_with(Tn& t, Fn&& value_at) {
  static_assert(std::is_same_v<typename Tn::unreduced, Unreduced<>>,
                "tpx: fill_with: a partial sum has no single value per element");
  static_assert(
      std::is_same_v<typename Tn::space, host_space>,
      "tpx: fill_with writes through host pointers: for a tensor of another memory space use "
      "generate(), which fills a host copy and moves it over");
  constexpr std::size_t n = Tn::order;
  if (t.size() == 0) return;
  if constexpr (n == 0) {
    t.local()[0] = static_cast<typename Tn::value_type>(value_at(std::int64_t{0}));
  } else {
    index_array<n> global_stride{};
    global_stride[n - 1] = 1;
    for (std::size_t d = n - 1; d > 0; --d)
      global_stride[d - 1] = global_stride[d] * t.global_extent(d);
    index_array<n> at{};
    for (auto& x : t.local()) {
      std::int64_t g = 0;
      for (std::size_t d = 0; d < n; ++d) g += (t.local_offset(d) + at[d]) * global_stride[d];
      x = static_cast<typename Tn::value_type>(value_at(g));
      for (std::size_t d = n; d-- > 0;) {
        if (++at[d] < t.local_extent(d)) break;
        at[d] = 0;
      }
    }
  }
}

namespace detail {
// A tensor of the rank's space whose host copy `stage` fills (directly when that space is the
// host).
template <class T, class... Spec, class R, class Stage>
rank_tensor_t<R, T, Spec...> made_on_host(const R& rank,
                                          const typename Tensor<T, Spec...>::shape_type& shape,
                                          Stage&& stage) {
  using Tn = rank_tensor_t<R, T, Spec...>;
  detail::check_factory<R, Tn>();
  if constexpr (std::is_same_v<typename Tn::space, host_space>) {
    Tn t(rank, shape);
    stage(t);
    return t;
  } else {
    Tensor<T, Spec...> staged(rank, shape);
    stage(staged);
    Tn t(rank, shape);
    Tn::space::from_host(rank, staged.data(), staged.size(), t.data());
    return t;
  }
}
}  // namespace detail

// The tensor whose element at global row-major index i is value_at(i), on this rank.
template <class T, class... Spec, class R, class Fn>
rank_tensor_t<R, T, Spec...> generate(const R& rank,
                                      const typename Tensor<T, Spec...>::shape_type& shape,
                                      Fn&& value_at) {
  return detail::made_on_host<T, Spec...>(rank, shape, [&](auto& t) { fill_with(t, value_at); });
}

// Normal(0, 1) entries (times scale), the same at each global index on any mesh.
template <class T, class... Spec, class R>
rank_tensor_t<R, T, Spec...> randn(const R& rank,
                                   const typename Tensor<T, Spec...>::shape_type& shape,
                                   std::uint64_t seed, float scale = 1.0f) {
  using Tn = rank_tensor_t<R, T, Spec...>;
  if constexpr (requires(Tn & t) {
                  Tn::space::fill_normal(rank, t.data(), t.local_extents(), t.local_offsets(),
                                         t.global_extents(), seed, scale);
                }) {
    detail::check_factory<R, Tn>();
    Tn t(rank, shape);
    Tn::space::fill_normal(rank, t.data(), t.local_extents(), t.local_offsets(), t.global_extents(),
                           seed, scale);
    return t;
  } else {
    return generate<T, Spec...>(rank, shape, [&](std::int64_t i) {
      return scale * kernels::normal_at(seed, static_cast<std::uint64_t>(i));
    });
  }
}

template <class T, class... Spec, class R>
rank_tensor_t<R, T, Spec...> zeros(const R& rank,
                                   const typename Tensor<T, Spec...>::shape_type& shape) {
  using Tn = rank_tensor_t<R, T, Spec...>;
  detail::check_factory<R, Tn>();
  return Tn(rank, shape);
}

// This rank's block of a global row-major array that every rank holds.
template <class T, class... Spec, class R>
rank_tensor_t<R, T, Spec...> from_global(const R& rank,
                                         const typename Tensor<T, Spec...>::shape_type& shape,
                                         std::span<const T> global) {
  return detail::made_on_host<T, Spec...>(rank, shape, [&](auto& t) {
    if (static_cast<std::int64_t>(global.size()) != element_count(t.global_extents()))
      throw std::invalid_argument("tpx: from_global: tensor " + std::string(t.notation.c_str()) +
                                  " has " + std::to_string(element_count(t.global_extents())) +
                                  " elements but the array has " + std::to_string(global.size()));
    copy_box(global.data(), t.global_extents(), t.local_offsets(), t.data(), t.local_extents(), {},
             t.local_extents());
  });
}

}  // namespace tpx

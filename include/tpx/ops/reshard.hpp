// reshard<Target>(t): move a tensor to another sharding, with the collectives worked out at
// compile time (ops/plan.hpp), and the plan visible as a type and as a sentence.
//
//   auto w = tpx::reshard<D<>, F<Y>>(w_shards);          // [D_X, F_Y] -> [D, F_Y]
//   using P = tpx::reshard_traits<decltype(w_shards), Tensor<float, D<>, F<Y>>>;
//   static_assert(std::is_same_v<P::steps, tpx::type_list<tpx::AllGather<X, D<>>>>);
//   P::description  // "AllGather<X>(D); -> [D, F_Y]"
//
// reshard<Target>(rank, t) is the same, with Target's mesh axes checked against the rank's mesh
// at compile time (ops/target_axes.hpp); reshard<Target>(t), for code without the rank, checks
// them at run time.
//
// Replicated -> sharded is a local slice, with no communication. Every change of sharding is
// spelled reshard (or a typed collective); none hides behind a conversion:
//   auto c = reshard<I<>, K<X>>(matmul(a, b));   // [I, K]{U_X} -> ReduceScatter<X>(K)
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tpx/core/compile_error.hpp"
#include "tpx/ops/collectives.hpp"
#include "tpx/ops/plan.hpp"
#include "tpx/ops/target_axes.hpp"
#include "tpx/sharding/steps.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

namespace detail {

// Runs steps [I, end) of a step list on t; dims are addressed by position, axes by their id in
// Universe.
template <class Universe, step_list Steps, int I = 0, AnyTensor Tn>
decltype(auto) apply_steps(Tn&& t) {
  if constexpr (I == Steps.count) {
    // Nothing (left) to do: the caller's tensor comes back as itself, not copied; a temporary
    // made by an earlier step comes back by value.
    if constexpr (std::is_lvalue_reference_v<Tn>)
      return (t);
    else
      return std::remove_cvref_t<Tn>(std::move(t));
  } else {
    constexpr plan_step s = Steps.steps[I];
    using T = std::remove_cvref_t<Tn>;
    using A = type_at_t<s.axis, Universe>;
    if constexpr (s.kind == step_kind::all_reduce) {
      return apply_steps<Universe, Steps, I + 1>(all_reduce<A>(std::forward<Tn>(t)));
    } else {
      using D = unsplit_t<type_at_t<s.dim, typename T::dims>>;
      if constexpr (s.kind == step_kind::all_gather) {
        return apply_steps<Universe, Steps, I + 1>(all_gather<A>(std::forward<Tn>(t)));
      } else if constexpr (s.kind == step_kind::reduce_scatter) {
        return apply_steps<Universe, Steps, I + 1>(reduce_scatter<A, D>(std::forward<Tn>(t)));
      } else if constexpr (s.kind == step_kind::all_to_all) {
        using To = unsplit_t<type_at_t<s.to_dim, typename T::dims>>;
        return apply_steps<Universe, Steps, I + 1>(all_to_all<A, D, To>(std::forward<Tn>(t)));
      } else {
        return apply_steps<Universe, Steps, I + 1>(slice<A, D>(std::forward<Tn>(t)));
      }
    }
  }
}

template <class Universe, class Dims, plan_step S>
struct step_type {
  static auto pick() {
    using A = type_at_t<S.axis, Universe>;
    if constexpr (S.kind == step_kind::all_reduce) {
      return AllReduce<A>{};
    } else {
      using D = unsplit_t<type_at_t<S.dim, Dims>>;
      if constexpr (S.kind == step_kind::all_gather)
        return AllGather<A, D>{};
      else if constexpr (S.kind == step_kind::reduce_scatter)
        return ReduceScatter<A, D>{};
      else if constexpr (S.kind == step_kind::all_to_all)
        return AllToAll<A, D, unsplit_t<type_at_t<S.to_dim, Dims>>>{};
      else
        return Slice<A, D>{};
    }
  }
  using type = decltype(pick());
};

template <class Universe, class Dims, step_list Steps, class Indices>
struct step_types;
template <class Universe, class Dims, step_list Steps, std::size_t... I>
struct step_types<Universe, Dims, Steps, std::index_sequence<I...>> {
  using type = type_list<typename step_type<Universe, Dims, Steps.steps[I]>::type...>;
};
template <class Universe, class Dims, step_list Steps>
using step_types_t =
    typename step_types<Universe, Dims, Steps, std::make_index_sequence<Steps.count>>::type;

// Target given as a tensor type or as a sharding argument list.
template <class Like, class... Spec>
struct target_tensor {
  using type = BasicTensor<typename Like::space, typename Like::value_type, Spec...>;
};
template <class Like, class Space, class T, class... Spec>
struct target_tensor<Like, BasicTensor<Space, T, Spec...>> {
  static_assert(std::is_same_v<T, typename Like::value_type>,
                "tpx: a target sharding keeps the element type; convert it separately (cast)");
  using type = BasicTensor<Space, T, Spec...>;
};

}  // namespace detail

template <AnyTensor From, AnyTensor To>
struct reshard_traits {
  using universe = unique_t<concat_t<typename From::traits::axes, typename To::traits::axes>>;
  static constexpr sharding_desc from = From::traits::parts::template describe<universe>();
  static constexpr sharding_desc to = To::traits::parts::template describe<universe>();
  static constexpr reshard_plan plan = plan_reshard<universe>(from, to);
  static constexpr bool possible = plan.error.size() == 0;
  using steps = detail::step_types_t<universe, typename From::dims, plan.steps>;
  static constexpr auto description = freeze<[] {
    static_string<240> text;
    append_steps(text, plan.steps, from, "", universe{});
    text += "-> ";
    append_notation(text, to, universe{});
    return text;
  }>();
};

// t resharded to Target, given as tensor type or as sharding arguments (reshard<B<X>, D<>>(t)).
// Given as an rvalue, t's buffer is handed to the first step: a collective over an axis of one
// rank then moves it into its result instead of copying (ops/collectives.hpp).
template <class... Target, class Tn>
  requires AnyTensor<std::remove_cvref_t<Tn>>
auto reshard(Tn&& t) {
  using From = std::remove_cvref_t<Tn>;
  using To = typename detail::target_tensor<From, Target...>::type;
  using traits = reshard_traits<From, To>;
  if constexpr (!traits::possible) {
    compile_error<freeze<[] { return traits::plan.error; }>()>{};
  } else {
    detail::check_target_axes<To>(t.context(), "reshard");
    return detail::apply_steps<typename traits::universe, traits::plan.steps>(std::forward<Tn>(t));
  }
}

// The same, Target's axes checked against rank's mesh at compile time.
template <class... Target, TypedRank R, class Tn>
  requires AnyTensor<std::remove_cvref_t<Tn>>
auto reshard(const R& rank, Tn&& t) {
  using To = typename detail::target_tensor<std::remove_cvref_t<Tn>, Target...>::type;
  static_assert(detail::check_axes_in_mesh<"reshard to " + To::notation, typename R::mesh_type,
                                               typename To::traits::axes>());
  detail::check_belongs_to(rank, t, "reshard");
  return reshard<To>(std::forward<Tn>(t));
}

// The whole tensor, in global row-major order, on every rank (a collective: all ranks call it).
template <AnyTensor Tn>
std::vector<typename Tn::value_type> to_global(const Tn& t) {
  using Replicated =
      tensor_with_t<Tn, typename remove_all_axes<typename Tn::dims>::type, Unreduced<>>;
  const Replicated whole = reshard<Replicated>(t);
  std::vector<typename Tn::value_type> host(whole.size());
  Tn::space::to_host(whole.context(), whole.data(), whole.size(), host.data());
  return host;
}

}  // namespace tpx

// matmul and contract: sharded matrix products whose collectives are chosen at compile time.
//
//   auto tmp = tpx::matmul(in, w);          // In[B_X, D] *_D W[D, F_Y] -> Tmp[B_X, F_Y]
//   auto dw  = tpx::contract<B>(in, dtmp);  // In[B_X, D]^T *_B dTmp[B_X, F] -> dW[D, F]{U_X}
//
// The contracted dim is named (matmul finds the one dim both operands have; contract<J> says
// which), so a backward product such as In^T *_B dTmp needs no transpose from the user: the
// dims' positions become BLAS transpose flags, never a materialized copy. The collectives follow
// the notes' four cases (ops/plan.hpp); matmul_traits<L, R>::description shows them, e.g.
// "AllGather<Y>(lhs, D); GEMM; -> [B_X, F_Y]", and ::lhs_steps / ::rhs_steps as types.
// matmul<Target>(a, b) states the result's sharding: it steers case 4 towards gathering the
// side that yields Target and then reshards (a reduction, typically) to Target;
// matmul<Target>(rank, a, b) also checks Target's mesh axes at compile time
// (ops/target_axes.hpp). Batched and multi-dim contractions (attention's [B, H, T, E] *_E
// [B, H, S, E]) are einsum (ops/einsum.hpp); contract<J...> goes there for anything but two
// matrices sharing one dim.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "tpx/core/compile_error.hpp"
#include "tpx/ops/einsum.hpp"
#include "tpx/ops/plan.hpp"
#include "tpx/ops/reshard.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

namespace detail {

// Dim D of a plan's result as a type: Dim split over the axes the plan lists.
template <class Plan, int D, class Dim, class Indices>
struct result_dim;
template <class Plan, int D, class Dim, std::size_t... I>
struct result_dim<Plan, D, Dim, std::index_sequence<I...>> {
  using type = typename Dim::template with_axes<
      type_at_t<Plan::plan.result.axis[D][I], typename Plan::universe>...>;
};

template <class Plan, class Indices>
struct result_unreduced;
template <class Plan, std::size_t... I>
struct result_unreduced<Plan, std::index_sequence<I...>> {
  using type = Unreduced<type_at_t<Plan::plan.result.unreduced[I], typename Plan::universe>...>;
};

// The result type of a possible plan (void for an impossible one, whose error is reported
// instead).
template <class Traits, class L, class R, bool Possible>
struct matmul_result {
  using type = void;
};
template <class Traits, class L, class R>
struct matmul_result<Traits, L, R, true> {
  // Traits::plan spelled out: nvcc rejects a static constexpr reference member here
  // ("has already been initialized").
  using type = tensor_with_t<
      L,
      type_list<
          typename result_dim<Traits, 0, type_at_t<1 - Traits::plan.lhs_contract, typename L::dims>,
                              std::make_index_sequence<Traits::plan.result.n_axes[0]>>::type,
          typename result_dim<Traits, 1, type_at_t<1 - Traits::plan.rhs_contract, typename R::dims>,
                              std::make_index_sequence<Traits::plan.result.n_axes[1]>>::type>,
      typename result_unreduced<Traits,
                                std::make_index_sequence<Traits::plan.result.n_unreduced>>::type>;
};

// The one dim (by name) both operands have, or an error naming what they share.
template <class L, class R>
struct shared_dim {
  template <class... Ls>
  static constexpr int count(type_list<Ls...>) {
    return ((dim_position_v<Ls, typename R::dims> >= 0 ? 1 : 0) + ... + 0);
  }
  template <class... Ls>
  static auto first(type_list<Ls...>) {
    return std::type_identity<
        type_at_t<0, concat_t<std::conditional_t<(dim_position_v<Ls, typename R::dims> >= 0),
                                                 type_list<unsplit_t<Ls>>, type_list<>>...,
                              type_list<void>>>>{};
  }
  static constexpr int shared = count(typename L::dims{});
  using type = typename decltype(first(typename L::dims{}))::type;
};

}  // namespace detail

template <AnyTensor L, AnyTensor R, Dim J, class Target = void>
struct matmul_traits {
  using universe = unique_t<concat_t<typename L::traits::axes, typename R::traits::axes>>;
  static constexpr sharding_desc lhs = L::traits::parts::template describe<universe>();
  static constexpr sharding_desc rhs = R::traits::parts::template describe<universe>();

  // With a Target, gather the left operand in case 4 when Target's second (right) dim keeps
  // the axis that both free dims are split over.
  static constexpr gather_preference prefer = [] {
    if constexpr (std::is_void_v<Target>) {
      return gather_preference::rhs;
    } else {
      using tuniverse = unique_t<concat_t<universe, typename Target::traits::axes>>;
      constexpr sharding_desc t = Target::traits::parts::template describe<tuniverse>();
      constexpr matmul_plan natural =
          plan_matmul<universe>(lhs, rhs, J::name.c_str(), gather_preference::rhs);
      if (t.ndims != 2 || natural.error.size() != 0) return gather_preference::rhs;
      for (int i = 0; i < natural.rhs_steps.count; ++i) {
        const plan_step& s = natural.rhs_steps.steps[i];
        // universe is a prefix of tuniverse, so axis ids agree.
        if (s.dim != natural.rhs_contract && t.dim_has_axis(1, s.axis))
          return gather_preference::lhs;
      }
      return gather_preference::rhs;
    }
  }();
  static constexpr matmul_plan plan = plan_matmul<universe>(lhs, rhs, J::name.c_str(), prefer);
  static constexpr bool possible = plan.error.size() == 0;

  using lhs_steps = detail::step_types_t<universe, typename L::dims, plan.lhs_steps>;
  using rhs_steps = detail::step_types_t<universe, typename R::dims, plan.rhs_steps>;
  using result = typename detail::matmul_result<matmul_traits, L, R, possible>::type;

  // "AllGather<X>(rhs, F); GEMM; -> [B_X, F]{U_Y}"
  static constexpr auto description = freeze<[] {
    static_string<300> text;
    append_steps(text, plan.lhs_steps, lhs, "lhs", universe{});
    append_steps(text, plan.rhs_steps, rhs, "rhs", universe{});
    text += "GEMM; -> ";
    append_notation(text, plan.result, universe{});
    return text;
  }>();
};

// Whether contract<J>(l, r) compiles, without compiling it.
template <class L, class R, class J>
inline constexpr bool can_contract_v = matmul_traits<L, R, J>::possible;

namespace detail {

template <class J, class Target, AnyTensor L, AnyTensor R>
auto contract_impl(const L& a, const R& b) {
  using traits = matmul_traits<L, R, J, Target>;
  if constexpr (!traits::possible) {
    compile_error<freeze<[] { return traits::plan.error; }>()>{};
  } else {
    constexpr int jl = traits::plan.lhs_contract, jr = traits::plan.rhs_contract;
    if (a.global_extent(jl) != b.global_extent(jr))
      throw std::invalid_argument("tpx: matmul " + std::string(L::notation.c_str()) + " *_" +
                                  J::name.c_str() + " " + R::notation.c_str() + ": dim " +
                                  J::name.c_str() + " has extent " +
                                  std::to_string(a.global_extent(jl)) + " on the left and " +
                                  std::to_string(b.global_extent(jr)) + " on the right (rank " +
                                  std::to_string(a.context().world_rank()) + ")");
    using universe = typename traits::universe;
    const auto& lhs = apply_steps<universe, traits::plan.lhs_steps>(a);  // a itself if no step
    const auto& rhs = apply_steps<universe, traits::plan.rhs_steps>(b);
    using Result = typename traits::result;
    Result out(a.context(),
               typename Result::shape_type(
                   index_array<2>{a.global_extent(1 - jl), b.global_extent(1 - jr)}),
               for_overwrite);  // the GEMM (beta = 0) writes it whole
    // lhs stored [I, J] (jl == 1) or [J, I]; rhs stored [J, K] (jr == 0) or [K, J].
    const std::int64_t m = out.local_extent(0), n = out.local_extent(1);
    const std::int64_t k = lhs.local_extent(jl);
    if (rhs.local_extent(jr) != k || lhs.local_extent(1 - jl) != m || rhs.local_extent(1 - jr) != n)
      throw std::logic_error("tpx: matmul: local blocks do not line up (a tpx bug)");
    auto leading = [](std::int64_t cols) { return std::max<std::int64_t>(cols, 1); };  // BLAS
    L::space::gemm(a.context(), jl == 0, jr == 1, m, n, k, 1.0f, lhs.data(),
                   leading(lhs.local_extent(1)), rhs.data(), leading(rhs.local_extent(1)), 0.0f,
                   out.data(), leading(n));
    if constexpr (std::is_void_v<Target>) {
      return out;
    } else {
      return reshard<Target>(out);
    }
  }
}

}  // namespace detail

namespace detail {
// Two matrices sharing exactly one dim: the two-dim product of this file, not a batched einsum.
template <class L, class R>
inline constexpr bool is_matrix_pair_v =
    L::order == 2 && R::order == 2 && shared_dim<L, R>::shared == 1;
}  // namespace detail

// a *_J b: contract the dim J that both operands have. Two matrices sharing only J are
// multiplied here; anything else (more dims, dims shared besides J, several contracted dims
// contract<J, K>) is einsum<J...>(a, b) (ops/einsum.hpp), which batches over the other shared dims.
template <Dim J, Dim... More, AnyTensor L, AnyTensor R>
auto contract(const L& a, const R& b) {
  if constexpr (sizeof...(More) == 0 && detail::is_matrix_pair_v<L, R>)
    return detail::contract_impl<unsplit_t<J>, void>(a, b);
  else
    return einsum<J, More...>(a, b);
}
template <template <class...> class J, template <class...> class... More, AnyTensor L,
          AnyTensor R>
auto contract(const L& a, const R& b) {
  return contract<J<>, More<>...>(a, b);
}

// a * b over the one dim they share. The target, if any, is spelled as for reshard: a whole
// tensor type (matmul<Tensor<float, I<X>, K<>>>(a, b)) or its dims and Unreduced
// (matmul<I<X>, K<>>(a, b)); both give the same result type.
template <class... Target, AnyTensor L, AnyTensor R>
auto matmul(const L& a, const R& b) {
  using shared = detail::shared_dim<L, R>;
  if constexpr (shared::shared != 1) {
    compile_error<"tpx: matmul " + L::notation + " * " + R::notation +
                  ": the operands must share exactly one dim to contract (name it with "
                  "contract<Dim>(a, b))">{};
  } else if constexpr (sizeof...(Target) == 0 ||
                       (sizeof...(Target) == 1 && (std::is_void_v<Target> && ...))) {
    return detail::contract_impl<typename shared::type, void>(a, b);
  } else {
    using To = typename detail::target_tensor<L, Target...>::type;
    detail::check_target_axes<To>(a.context(), "matmul");
    return detail::contract_impl<typename shared::type, To>(a, b);
  }
}

// The same, the target's axes checked against rank's mesh at compile time:
// matmul<I<X>, K<>>(rank, a, b).
template <class... Target, TypedRank Rk, AnyTensor L, AnyTensor R>
auto matmul(const Rk& rank, const L& a, const R& b) {
  if constexpr (sizeof...(Target) > 0 && !(std::is_void_v<Target> && ...)) {
    using To = typename detail::target_tensor<L, Target...>::type;
    static_assert(detail::check_axes_in_mesh<"matmul to " + To::notation, typename Rk::mesh_type,
                                               typename To::traits::axes>());
  }
  detail::check_belongs_to(rank, a, "matmul");
  detail::check_belongs_to(rank, b, "matmul");
  return matmul<Target...>(a, b);
}

// The plan of matmul(l, r), for static_asserts: ::lhs_steps, ::rhs_steps, ::result,
// ::description.
template <AnyTensor L, AnyTensor R>
using matmul_plan_t = matmul_traits<
    std::remove_cvref_t<L>, std::remove_cvref_t<R>,
    typename detail::shared_dim<std::remove_cvref_t<L>, std::remove_cvref_t<R>>::type>;

}  // namespace tpx

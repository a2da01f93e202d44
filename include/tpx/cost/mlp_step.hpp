// The step that cost/mlp.hpp's predict_layer prices, as a program: one forward and backward pass
// of the notes' MLP layer under a layout (dp, fsdp, tp, fsdp_tp), running the collectives of the
// plans tpx compiles for it through the typed collectives, and the local GEMMs between them. So
// the prediction can be set beside what runs: tpx-bench-matmul-strategies times the step's parts
// (bench/matmul_strategies.cpp), and cost_model_dry_run_test counts what its collectives move
// under tpx::dry_run, at any size, against the prediction's bus bytes and collectives.
//
//   forward   Tmp = In W_in; Out = reduce(Tmp W_out)        gathered weights dropped after use
//   backward  dOut = Out (loss = sum(Out^2) / 2); dW_out = Tmp^T dOut; dTmp = dOut W_out^T
//             (W_out gathered again); dW_in = In^T dTmp; dIn = dTmp W_in^T (W_in gathered again);
//             each gradient brought to its tensor's type: the adjoints of the forward's steps,
//             last first (apply<adjoint_t<Step>>), then what is left (DP's AllReduce)
//
// as tests/unit/fsdp_tp_mlp_test.cpp writes FSDP + TP's by hand. Every part runs inside
// `around(part, fn)`, which returns fn()'s result: the bench's times it between barriers,
// run_directly just calls it.
#pragma once

#include <type_traits>
#include <utility>

#include "tpx/cost/mlp.hpp"
#include "tpx/tpx.hpp"

namespace tpx::cost {

// What an `around` is told a part of a step is.
enum class step_part { forward_communication, forward_compute, backward_communication, backward_compute };

// An `around` that only runs the part.
inline constexpr auto run_directly = [](step_part, auto&& fn) -> decltype(auto) { return fn(); };

namespace detail {
// The steps of a plan, as types, through tpx's typed collectives (tpx::apply<Step>).
template <class Step, class... Rest, class Tn>
auto run_steps(type_list<Step, Rest...>, const Tn& t) {
  if constexpr (sizeof...(Rest) == 0)
    return apply<Step>(t);
  else
    return run_steps(type_list<Rest...>{}, apply<Step>(t));
}
// The backward of run_steps on a gradient: the adjoint of each step, last step first.
template <class Step, class... Rest, class Tn>
auto run_adjoints(type_list<Step, Rest...>, const Tn& g) {
  if constexpr (sizeof...(Rest) == 0)
    return apply<adjoint_t<Step>>(g);
  else
    return apply<adjoint_t<Step>>(run_adjoints(type_list<Rest...>{}, g));
}
}  // namespace detail

// t after Steps, run inside communicate(fn); t itself, untouched, when there are none.
template <class Steps, class Tn, class Communicate>
decltype(auto) after_steps(const Tn& t, Communicate&& communicate) {
  if constexpr (std::is_same_v<Steps, type_list<>>)
    return (t);
  else
    return communicate([&] { return detail::run_steps(Steps{}, t); });
}

// g after the adjoints of Steps, run inside communicate(fn); g itself when there are none.
template <class Steps, class Tn, class Communicate>
decltype(auto) after_adjoints(const Tn& g, Communicate&& communicate) {
  if constexpr (std::is_same_v<Steps, type_list<>>)
    return (g);
  else
    return communicate([&] { return detail::run_adjoints(Steps{}, g); });
}

// The gradient of a tensor of type Target whose forward pass ran Steps on it: the adjoints of
// Steps on the partial gradient g, then whatever reshard is left to Target's type (DP's
// AllReduce of a weight gradient, which the forward pass has no step for).
template <class Target, class Steps, class Tn, class Communicate>
Target gradient_to(const Tn& g, Communicate&& communicate) {
  const auto& adjoint = after_adjoints<Steps>(g, communicate);
  using rest = typename reshard_traits<std::remove_cvref_t<decltype(adjoint)>, Target>::steps;
  return Target(after_steps<rest>(adjoint, communicate));
}

// contract<J>(a, b) inside compute(fn), for operands whose product needs no collective (in the
// backward pass every operand has been gathered as the forward pass gathered it).
template <template <class...> class J, class L, class R, class Compute>
auto local_contract(const L& a, const R& b, Compute&& compute) {
  using plan = matmul_traits<L, R, J<>>;
  static_assert(plan::plan.lhs_steps.count == 0 && plan::plan.rhs_steps.count == 0,
                "tpx::cost::local_contract: a backward product needs a collective; run it as "
                "communication before contracting");
  return compute([&] { return contract<J>(a, b); });
}

namespace mlp {

// A layout's tensor type (host tensors: mlp.hpp) in memory space Space: a rank's tensors live in
// its launcher's space (meta tensors under tpx::dry_run, device tensors on a GPU).
template <class Space, class Tn>
struct in_space;
template <class Space, class Host, class T, class... Spec>
struct in_space<Space, BasicTensor<Host, T, Spec...>> {
  using type = BasicTensor<Space, T, Spec...>;
};
template <class Space, class Tn>
using in_space_t = typename in_space<Space, Tn>::type;

// The layer's output and its three gradients, each of its tensor's type in Space.
template <class Layout, class Space>
struct step_result {
  in_space_t<Space, typename Layout::out> out;
  in_space_t<Space, typename Layout::in> d_in;
  in_space_t<Space, typename Layout::w_in> d_w_in;
  in_space_t<Space, typename Layout::w_out> d_w_out;
};

// One forward and backward pass of layout Layout's layer (see the top), on tensors of its types
// in memory space Space (not deduced: run_step<fsdp, tpx::host_space>(in, w_in, w_out, around)).
template <class Layout, class Space, class Around>
step_result<Layout, Space> run_step(const in_space_t<Space, typename Layout::in>& in,
                                    const in_space_t<Space, typename Layout::w_in>& w_in,
                                    const in_space_t<Space, typename Layout::w_out>& w_out,
                                    Around&& around) {
  using in_t = in_space_t<Space, typename Layout::in>;
  using w_in_t = in_space_t<Space, typename Layout::w_in>;
  using w_out_t = in_space_t<Space, typename Layout::w_out>;
  using out_t = in_space_t<Space, typename Layout::out>;
  using first = matmul_plan_t<in_t, w_in_t>;
  using second = matmul_plan_t<typename first::result, w_out_t>;
  using reduce_out = typename reshard_traits<typename second::result, out_t>::steps;
  static_assert(std::is_same_v<typename second::lhs_steps, type_list<>>,
                "tpx::cost::mlp::run_step: the backward pass assumes Tmp is used as computed");
  const auto part = [&](step_part p) {
    return [&, p](auto&& fn) -> decltype(auto) { return around(p, fn); };
  };
  const auto forward_comm = part(step_part::forward_communication);
  const auto forward_compute = part(step_part::forward_compute);
  const auto backward_comm = part(step_part::backward_communication);
  const auto backward_compute = part(step_part::backward_compute);

  // Forward. In as gathered, (B.., D), is kept for the backward pass, and so is Tmp, (B.., F..).
  const auto& in_full = after_steps<typename first::lhs_steps>(in, forward_comm);
  const auto tmp = [&] {
    const auto& w = after_steps<typename first::rhs_steps>(w_in, forward_comm);
    return forward_compute([&] { return matmul(in_full, w); });
  }();
  out_t out = [&] {
    const auto& w = after_steps<typename second::rhs_steps>(w_out, forward_comm);
    const auto partial = forward_compute([&] { return matmul(tmp, w); });
    return out_t(after_steps<reduce_out>(partial, forward_comm));
  }();

  // Backward, with dOut = Out.
  const auto& dout_full = after_adjoints<reduce_out>(out, backward_comm);  // (B.., D)
  w_out_t d_w_out = gradient_to<w_out_t, typename second::rhs_steps>(
      local_contract<B>(tmp, dout_full, backward_compute), backward_comm);
  const auto dtmp = [&] {  // (B.., F..), with W_out gathered again
    const auto& w = after_steps<typename second::rhs_steps>(w_out, backward_comm);
    return local_contract<D>(dout_full, w, backward_compute);
  }();
  w_in_t d_w_in = gradient_to<w_in_t, typename first::rhs_steps>(
      local_contract<B>(in_full, dtmp, backward_compute), backward_comm);
  in_t d_in = [&] {
    const auto& w = after_steps<typename first::rhs_steps>(w_in, backward_comm);
    return gradient_to<in_t, typename first::lhs_steps>(local_contract<F>(dtmp, w, backward_compute),
                                                        backward_comm);
  }();
  return {std::move(out), std::move(d_in), std::move(d_w_in), std::move(d_w_out)};
}

}  // namespace mlp
}  // namespace tpx::cost

// step_chain: how the GPT example (model.hpp) names the collectives between a parameter's shards
// and the tensor its products use, and between the residual stream and a sublayer: a list of
// typed steps, run forward before use and as adjoints, in reverse, on the gradient.
#pragma once

#include <tpx/tpx.hpp>
#include <type_traits>
#include <utility>

namespace gpt {

// A chain of collectives named as types, and its adjoint: the adjoints of the steps in reverse
// (no step: the tensor as it is, both ways). A tensor handed over (an rvalue) goes through as one,
// so that on an axis of one rank each step moves its buffer on instead of copying it
// (ops/collectives.hpp).
template <class... Steps>
struct step_chain {
  template <tpx::AnyTensor Tn>
  static auto forward(Tn&& t) {
    if constexpr (sizeof...(Steps) == 0)
      return std::decay_t<Tn>(std::forward<Tn>(t));
    else
      return run<Steps...>(std::forward<Tn>(t));
  }
  template <tpx::AnyTensor Tn>
  static auto backward(Tn&& t) {
    if constexpr (sizeof...(Steps) == 0)
      return std::decay_t<Tn>(std::forward<Tn>(t));
    else
      return reversed<Steps...>(std::forward<Tn>(t));
  }

 private:
  template <class First, class... Rest, class Tn>
  static auto run(Tn&& t) {
    if constexpr (sizeof...(Rest) == 0)
      return tpx::apply<First>(std::forward<Tn>(t));
    else
      return run<Rest...>(tpx::apply<First>(std::forward<Tn>(t)));
  }
  template <class First, class... Rest, class Tn>
  static auto reversed(Tn&& t) {
    if constexpr (sizeof...(Rest) == 0)
      return tpx::apply<tpx::adjoint_t<First>>(std::forward<Tn>(t));
    else
      return tpx::apply<tpx::adjoint_t<First>>(reversed<Rest...>(std::forward<Tn>(t)));
  }
};

}  // namespace gpt

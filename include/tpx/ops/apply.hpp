// apply<Step>(t): run a collective named by its step type (sharding/steps.hpp).
//
// This is what lets a backward pass be derived rather than written: a layer names the step of
// its forward pass as a type, `using gather_w = AllGather<X, D<>>`, applies it with
// apply<gather_w>(w), and applies apply<adjoint_t<gather_w>>(dw) to the gradient. Changing the
// forward sharding changes the backward collective with it.
#pragma once

#include <utility>

#include "tpx/ops/collectives.hpp"
#include "tpx/sharding/steps.hpp"

namespace tpx {

template <class Step>
struct step_runner;
template <class A, class D>
struct step_runner<AllGather<A, D>> {
  template <AnyTensor Tn>
  static auto run(Tn&& t) {
    return all_gather<A>(std::forward<Tn>(t));
  }
};
template <class A, class D>
struct step_runner<ReduceScatter<A, D>> {
  template <AnyTensor Tn>
  static auto run(Tn&& t) {
    return reduce_scatter<A, D>(std::forward<Tn>(t));
  }
};
template <class A>
struct step_runner<AllReduce<A>> {
  template <AnyTensor Tn>
  static auto run(Tn&& t) {
    return all_reduce<A>(std::forward<Tn>(t));
  }
};
template <class A, class From, class To>
struct step_runner<AllToAll<A, From, To>> {
  template <AnyTensor Tn>
  static auto run(const Tn& t) {
    return all_to_all<A, From, To>(t);
  }
};
template <class A, class D>
struct step_runner<Slice<A, D>> {
  template <AnyTensor Tn>
  static auto run(const Tn& t) {
    return slice<A, D>(t);
  }
};
template <class A, class D>
struct step_runner<Embed<A, D>> {
  template <AnyTensor Tn>
  static auto run(const Tn& t) {
    return embed<A, D>(t);
  }
};

// An rvalue goes on as one: a gather or reduction over an axis of one rank then moves its buffer
// instead of copying it (ops/collectives.hpp).
template <class Step, AnyTensor Tn>
auto apply(Tn&& t) {
  return step_runner<Step>::run(std::forward<Tn>(t));
}

}  // namespace tpx

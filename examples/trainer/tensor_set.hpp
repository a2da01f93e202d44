// tensor_set<Derived>: a model's parameter-shaped tensors walked by name, in a fixed order, the
// one loop that initialization, the optimizer, gradient norms and checkpoints all use.
//
//   struct model_tensors : tensor_set<model_tensors> { ...; static void visit(Self&, Fn&, ...); };
//   params.for_each([](const std::string& name, auto& p, auto& g) { ... }, grads);
//
// Derived lists its tensors once, in a static visit(self, f, others...) that calls
// f(name, self's tensor, each other set's tensor of that name); for_each calls it on this set,
// const or not, so the MLP trainer's and the GPT example's models share the walk. fill_staged
// sets one of those tensors at initialization, staged_tensor makes a step's batch.
#pragma once

#include <tpx/tensor/meta_space.hpp>
#include <tpx/tensor/staging.hpp>
#include <tpx/tpx.hpp>
#include <utility>

namespace trainer {

// A tensor Tn of `shape` whose element at global index i is value_at(i), filled on the host and
// copied to Tn's space (a step's batch: the step's one copy to a device); for a tensor without
// values (a dry run's) only made, without a host copy or a call of value_at, which would be most
// of a dry run's time.
template <tpx::AnyTensor Tn, class Fn>
Tn staged_tensor(const tpx::rank_context& rank, const typename Tn::shape_type& shape,
                 Fn&& value_at) {
  if constexpr (tpx::holds_values<typename Tn::space>) {
    tpx::host_twin_t<Tn> h(rank, shape);
    tpx::fill_with(h, value_at);
    return tpx::in_space<typename Tn::space>(std::move(h));
  } else {
    return Tn(rank, shape);
  }
}

// Overwrites t with value_at(global index), as staged_tensor makes it (at initialization, outside
// the training step); nothing for a tensor without values.
template <tpx::AnyTensor Tn, class Fn>
void fill_staged(Tn& t, Fn&& value_at) {
  if constexpr (tpx::holds_values<typename Tn::space>)
    t = staged_tensor<Tn>(t.context(), t.shape(), std::forward<Fn>(value_at));
}

template <class Derived>
class tensor_set {
 public:
  // f(name, tensor, others' tensor of the same name...) for every tensor, in a fixed order.
  template <class Fn, class... Others>
  void for_each(Fn&& f, Others&... others) {
    Derived::visit(static_cast<Derived&>(*this), f, others...);
  }
  template <class Fn, class... Others>
  void for_each(Fn&& f, Others&... others) const {
    Derived::visit(static_cast<const Derived&>(*this), f, others...);
  }
};

}  // namespace trainer

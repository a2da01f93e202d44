// The two named crossings between a tensor's memory space and host memory. Nothing else in tpx
// moves a tensor's elements to or from the host: a device tensor's local() does not compile
// (tensor.hpp), so a step cannot read device memory by accident.
//
//   on_host(t)            t's elements in host memory: t itself for a host tensor (no copy),
//                         else a host tensor of the same sharding holding a copy (it waits for
//                         the rank's stream)
//   in_space<Space>(h)    a tensor of Space with the elements of the host tensor h: h itself,
//                         moved, when Space is the host
//   scalar_on_host(s)     the value of a scalar tensor (a loss, a norm), read through on_host
//   copy_from_host(t, h)  h's elements into the existing tensor t, whose buffer stays (the input
//                         of a step recorded once and replayed, spmd/recorded_step.hpp)
//
// What crosses in a training step is the batch (in_space, once per step) and, on the steps that
// report them, the loss and gradient norm (on_host of two scalars). Initial weights and
// checkpoints cross too, outside the step. tests/trainer/staging_test.cpp counts the bytes.
#pragma once

#include <stdexcept>
#include <type_traits>
#include <utility>

#include "tpx/tensor/tensor.hpp"

namespace tpx {

template <class Tn>
struct host_twin;
template <class Space, class T, class... Spec>
struct host_twin<BasicTensor<Space, T, Spec...>> {
  using type = BasicTensor<host_space, T, Spec...>;
};
// The host tensor type with Tn's element type and sharding.
template <class Tn>
using host_twin_t = typename host_twin<Tn>::type;

template <AnyTensor Tn>
decltype(auto) on_host(const Tn& t) {
  if constexpr (std::is_same_v<typename Tn::space, host_space>) {
    return (t);  // const Tn&
  } else {
    host_twin_t<Tn> h(t.context(), t.shape());
    Tn::space::to_host(t.context(), t.data(), t.size(), h.data());
    return h;
  }
}

template <class Space, class T, class... Spec>
BasicTensor<Space, T, Spec...> in_space(BasicTensor<host_space, T, Spec...>&& h) {
  if constexpr (std::is_same_v<Space, host_space>) {
    return std::move(h);
  } else {
    BasicTensor<Space, T, Spec...> t(h.context(), h.shape());
    Space::from_host(h.context(), h.data(), h.size(), t.data());
    return t;
  }
}

template <class Space, class T, class... Spec>
void copy_from_host(BasicTensor<Space, T, Spec...>& t,
                    const BasicTensor<host_space, T, Spec...>& h) {
  if (t.global_extents() != h.global_extents())
    throw std::invalid_argument("tpx: copy_from_host: the host tensor's extents differ from "
                                "those of the tensor it is copied into");
  Space::from_host(h.context(), h.data(), h.size(), t.data());
}

template <AnyTensor Tn>
typename Tn::value_type scalar_on_host(const Tn& s) {
  static_assert(Tn::order == 0 && std::is_same_v<typename Tn::unreduced, Unreduced<>>,
                "tpx: scalar_on_host: give a reduced scalar tensor");
  return on_host(s).local()[0];
}

}  // namespace tpx

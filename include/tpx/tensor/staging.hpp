// Staging between a tensor's memory space and host memory, for code that reads or writes
// elements one by one on the host (the example trainer's embedding lookup and loss rows,
// nn/rmsnorm.hpp's row loops).
//
//   on_host(t)            t's elements in host memory: t itself for a host tensor (no copy),
//                         else a host tensor of the same sharding holding a copy
//   in_space<Space>(h)    a tensor of Space with the elements of the host tensor h: h itself,
//                         moved, when Space is the host
//
// For host tensors both are free, so code written with them runs the host backend exactly as
// before. For device tensors they are the correctness-first fallback of an operation with no
// device kernel: copy in, loop on the host, copy back (each copy waits for the rank's stream).
// GEMMs and collectives never go through here; they run in the tensor's own space.
#pragma once

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

}  // namespace tpx

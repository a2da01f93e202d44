// The squared L2 norm of a sharded tensor, as a typed partial sum, for gradient clipping by the
// global norm.
//
// A rank's sum of squares over its block is a partial sum over exactly the mesh axes that split
// the tensor's dims: over axes that merely replicate it, every rank already holds the same sum.
// So squared_norm(t) returns Tensor<float, Unreduced<those axes>>, and reshard<Tensor<float>>
// reduces it correctly whatever the parameter's sharding; norms of differently sharded
// parameters are added after that reduction. (llm.c's ZeRO note: clipping is a reduction over
// all gradients, so it needs communication.) The local sum runs in the tensor's memory space
// (Space::sum_of_squares); only the reduced scalar is copied to the host.
#pragma once

#include "tpx/ops/reshard.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/staging.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::nn {

namespace detail {
// Unreduced over every axis that splits one of Dims.
template <class Dims>
struct splitting_axes;
template <class... Dims>
struct splitting_axes<type_list<Dims...>> {
  using type = as_unreduced_t<concat_t<typename Dims::axes...>>;
};
}  // namespace detail

// sum of t[i]^2 over the whole global tensor, on every rank.
template <AnyTensor Tn>
float squared_norm(const Tn& t) {
  static_assert(std::is_same_v<typename Tn::unreduced, Unreduced<>>,
                "tpx: squared_norm: reduce the tensor first");
  using Partial = tensor_with_t<BasicTensor<typename Tn::space, float>, type_list<>,
                                typename detail::splitting_axes<typename Tn::dims>::type>;
  Partial partial(t.context(), {});
  Tn::space::sum_of_squares(t.context(), t.size(), t.data(), partial.data());
  return on_host(reshard<BasicTensor<typename Tn::space, float>>(partial)).local()[0];
}

}  // namespace tpx::nn

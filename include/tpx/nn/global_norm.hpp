// The squared L2 norm of a sharded tensor, as a typed partial sum, for gradient clipping by the
// global norm.
//
// A rank's sum of squares over its block is a partial sum over exactly the mesh axes that split
// the tensor's dims: over axes that merely replicate it, every rank already holds the same sum.
// So the partial is a Tensor<float, Unreduced<those axes>>, and reshard<Tensor<float>> reduces it
// correctly whatever the parameter's sharding; norms of differently sharded parameters are added
// after that reduction. (llm.c's ZeRO note: clipping is a reduction over all gradients, so it
// needs communication.) Everything stays in the tensor's memory space: squared_norm returns a
// scalar tensor there, and clip_factor turns the summed squares into AdamW's gradient scale there
// too, so clipping never waits for the host. Read a value with on_host (tensor/staging.hpp) only
// when it is to be printed.
#pragma once

#include "tpx/kernels/optimizer.hpp"
#include "tpx/ops/elementwise.hpp"
#include "tpx/ops/reshard.hpp"
#include "tpx/sharding/transforms.hpp"
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

// sum of t[i]^2 over the whole global tensor, on every rank, as a scalar in t's memory space.
template <AnyTensor Tn>
auto squared_norm(const Tn& t) {
  static_assert(std::is_same_v<typename Tn::unreduced, Unreduced<>>,
                "tpx: squared_norm: reduce the tensor first");
  using Partial = tensor_with_t<BasicTensor<typename Tn::space, float>, type_list<>,
                                typename detail::splitting_axes<typename Tn::dims>::type>;
  Partial partial(t.context(), {}, for_overwrite);
  Tn::space::sum_of_squares(t.context(), t.size(), t.data(), partial.data());
  return reshard<BasicTensor<typename Tn::space, float>>(partial);
}

// The factor that clips a gradient of the given squared norm to norm `clip` (1 when clip <= 0 or
// the norm is within it): AdamW's grad_scale, computed where the norm is.
template <AnyTensor Scalar>
Scalar clip_factor(const Scalar& squared, float clip) {
  static_assert(Scalar::order == 0 && std::is_same_v<typename Scalar::value_type, float>,
                "tpx: clip_factor: give the summed squared norm, a float scalar");
  return map(kernels::clip_factor{clip}, squared);
}

}  // namespace tpx::nn

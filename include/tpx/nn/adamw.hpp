// AdamW on parameter shards: each rank updates only the block of each parameter it owns (FSDP /
// ZeRO-3), with fp32 master weights and moments of the same sharding as the parameter.
//
// The optimizer needs no communication: the gradient arrives already reduce-scattered onto the
// parameter's sharding (the adjoint of the forward AllGather), so the update is local. The only
// global quantity, the gradient norm for clipping, is nn/global_norm.hpp's; its clip_factor
// arrives as a scalar tensor in the parameters' memory space, which the update reads there. The
// update runs in the tensors' memory space (Space::adamw: a host loop, or one CUDA kernel), with
// the same per-element functor (kernels/optimizer.hpp). The step number t is a host int, or a
// scalar tensor in the space for a step that is recorded once and replayed.
#pragma once

#include <type_traits>

#include "tpx/kernels/optimizer.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::nn {

struct adamw_config {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

namespace detail {
template <AnyTensor P, AnyTensor G, AnyTensor S>
void check_adamw_operands() {
  static_assert(S::order == 0 && std::is_same_v<typename S::value_type, float> &&
                    std::is_same_v<typename S::space, typename P::space>,
                "tpx: adamw_step: grad_scale is a float scalar in the parameter's memory space");
  static_assert(std::is_same_v<typename P::dims, typename G::dims> &&
                    std::is_same_v<typename G::unreduced, Unreduced<>>,
                "tpx: adamw_step: the gradient must be reduced onto the parameter's sharding");
  static_assert(std::is_same_v<typename P::value_type, float>,
                "tpx: adamw_step: master weights are fp32");
  static_assert(std::is_same_v<typename P::space, typename G::space>,
                "tpx: adamw_step: the gradient must be in the parameter's memory space");
}

inline kernels::adamw_update adamw_base(const adamw_config& c) {
  return {c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, 1.0f, 1.0f, 1.0f};
}
}  // namespace detail

// One AdamW step (t counts from 1) on this rank's block of `param`, the gradient multiplied by
// the scalar grad_scale; the moments m and v are sharded like the parameter.
template <AnyTensor P, AnyTensor G, AnyTensor S>
void adamw_step(P& param, const G& grad, P& m, P& v, const adamw_config& c, int t,
                const S& grad_scale) {
  detail::check_adamw_operands<P, G, S>();
  P::space::adamw(param.context(), param.size(),
                  detail::adamw_base(c).at_step(static_cast<float>(t)), nullptr, grad_scale.data(),
                  param.data(), grad.data(), m.data(), v.data());
}

// The same with t a float scalar in the parameter's memory space, read there: a step recorded
// once and replayed (a CUDA graph, spmd/recorded_step.hpp) advances t on the device. A float
// holds every step number up to 2^24 exactly. On the host the results equal the int t's bit for
// bit; on a GPU the bias corrections come from the device's powf, which may differ from the
// host's in the last bit.
template <AnyTensor P, AnyTensor G, AnyTensor T, AnyTensor S>
void adamw_step(P& param, const G& grad, P& m, P& v, const adamw_config& c, const T& t,
                const S& grad_scale) {
  detail::check_adamw_operands<P, G, S>();
  static_assert(T::order == 0 && std::is_same_v<typename T::value_type, float> &&
                    std::is_same_v<typename T::space, typename P::space>,
                "tpx: adamw_step: the step number t is a float scalar in the parameter's memory "
                "space (or an int)");
  P::space::adamw(param.context(), param.size(), detail::adamw_base(c), t.data(),
                  grad_scale.data(), param.data(), grad.data(), m.data(), v.data());
}

}  // namespace tpx::nn

// The notes' MLP layer under the four layouts users choose between, and what the cost model
// predicts for one training step of it on a given cluster.
//
//   In[B, D] *_D W_in[D, F] *_F W_out[F, D] -> Out[B, D]       B: tokens, D: model, F: hidden
//   dp       In[B_X, D]    W_in[D, F]      W_out[F, D]      Out[B_X, D]
//   fsdp     In[B_X, D]    W_in[D_X, F]    W_out[F, D_X]    Out[B_X, D]
//   tp       In[B, D_Y]    W_in[D, F_Y]    W_out[F_Y, D]    Out[B, D_Y]
//   fsdp_tp  In[B_X, D_Y]  W_in[D_X, F_Y]  W_out[F_Y, D_X]  Out[B_X, D_Y]
//
// The forward pass is priced from the plans tpx compiles for it: matmul(In, W_in),
// matmul(Tmp, W_out) and the reshard of the product to Out's type (cost/matmul.hpp). The
// backward pass follows the notes' step lists: four GEMMs of the forward's size (twice its
// FLOPs); the adjoint of every forward collective, which moves the same bytes
// (AllGather <-> ReduceScatter, sharding/steps.hpp); a second AllGather of each weight the
// forward gathered (FSDP frees the gathered weight after use); and an AllReduce of a weight's
// gradient over each axis that splits the batch but not the weight (data parallelism).
// Memory per device counts parameters, gradients and optimizer state at bytes_per_parameter
// (16 for mixed-precision Adam: bf16 weight and gradient, fp32 master weight and two moments),
// the largest weight a device gathers at once, and the activations kept for the backward pass.
#pragma once

#include <algorithm>
#include <string_view>

#include "tpx/cost/matmul.hpp"
#include "tpx/sharding/dim.hpp"
#include "tpx/sharding/mesh_axis.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::cost::mlp {

TPX_MESH_AXES(X, Y);  // X splits the batch (and FSDP's weights), Y is the tensor-parallel axis
TPX_DIMS(B, D, F);

using mesh = Mesh<X, Y>;

template <class In, class WIn, class WOut, class Out>
struct layout {
  using in = In;
  using w_in = WIn;
  using w_out = WOut;
  using out = Out;
};

using dp = layout<Tensor<float, B<X>, D<>>, Tensor<float, D<>, F<>>, Tensor<float, F<>, D<>>,
                  Tensor<float, B<X>, D<>>>;
using fsdp = layout<Tensor<float, B<X>, D<>>, Tensor<float, D<X>, F<>>, Tensor<float, F<>, D<X>>,
                    Tensor<float, B<X>, D<>>>;
using tp = layout<Tensor<float, B<>, D<Y>>, Tensor<float, D<>, F<Y>>, Tensor<float, F<Y>, D<>>,
                  Tensor<float, B<>, D<Y>>>;
using fsdp_tp = layout<Tensor<float, B<X>, D<Y>>, Tensor<float, D<X>, F<Y>>,
                       Tensor<float, F<Y>, D<X>>, Tensor<float, B<X>, D<Y>>>;

struct shape {
  double batch = 0;    // B: tokens in the global batch (batch x sequence)
  double d_model = 0;  // D
  double d_ff = 0;     // F
};

struct layer_estimate {
  op_estimate forward;
  op_estimate backward;
  double state_bytes = 0;       // parameters, gradients and optimizer state, per device
  double gathered_bytes = 0;    // the largest weight block a device holds gathered
  double activation_bytes = 0;  // In and Tmp blocks kept for the backward pass

  constexpr op_estimate step() const {
    op_estimate s = forward;
    s += backward;
    return s;
  }
  constexpr double memory_bytes() const { return state_bytes + gathered_bytes + activation_bytes; }
  // The best fraction of peak FLOP/s a step can reach when communication overlaps compute.
  constexpr double mfu_ceiling() const {
    const op_estimate s = step();
    return s.math_seconds / std::max(s.compute_seconds(), s.comm.seconds);
  }
};

namespace detail {
// AllReduce<A> of a weight gradient of `elements` local elements, for each axis A that splits
// the batch dim of In but not the weight W.
template <class In, class W, class Sys>
constexpr comm_estimate gradient_all_reduce(const Sys& sys, double elements, double bpe) {
  return [&]<class... As>(type_list<As...>) {
    comm_estimate c;
    ((c += index_of_v<As, typename W::traits::axes> < 0
               ? cost::detail::collective<As>(sys, elements * bpe, 2)
               : comm_estimate{}),
     ...);
    return c;
  }(typename type_at_t<0, typename In::dims>::axes{});
}
}  // namespace detail

// One layer of layout L (dp, fsdp, tp or fsdp_tp) on sys, elements of bpe bytes.
template <class L, class Sys>
constexpr layer_estimate predict_layer(const Sys& sys, shape s, double bpe,
                                       double bytes_per_parameter = 16) {
  using in = typename L::in;
  using first = matmul_plan_t<in, typename L::w_in>;
  using tmp = typename first::result;
  using second = matmul_plan_t<tmp, typename L::w_out>;
  const double b = s.batch, d = s.d_model, f = s.d_ff;

  layer_estimate e;
  const op_estimate up = predict_matmul<in, typename L::w_in>(sys, {b, d}, {d, f}, bpe);
  const op_estimate down = predict_matmul<tmp, typename L::w_out>(sys, {b, f}, {f, d}, bpe);
  e.forward = up;
  e.forward += down;
  e.forward.comm += predict_reshard<typename second::result, typename L::out>(sys, b * d, bpe);

  // The weights as each device holds them, and after the forward gathered them.
  double w_in = d * f / shard_count<typename L::w_in>(sys.mesh), w_in_used = w_in;
  double w_out = f * d / shard_count<typename L::w_out>(sys.mesh), w_out_used = w_out;
  const comm_estimate regather_in =
      steps_cost<typename L::w_in>(typename first::rhs_steps{}, w_in_used, sys, bpe);
  const comm_estimate regather_out =
      steps_cost<typename L::w_out>(typename second::rhs_steps{}, w_out_used, sys, bpe);

  e.backward.flops = 2 * e.forward.flops;
  e.backward.math_seconds = 2 * e.forward.math_seconds;
  e.backward.memory_seconds = 2 * e.forward.memory_seconds;
  e.backward.comm = e.forward.comm;  // the adjoints
  e.backward.comm += regather_in;
  e.backward.comm += regather_out;
  e.backward.comm += detail::gradient_all_reduce<in, typename L::w_in>(sys, w_in_used, bpe);
  e.backward.comm += detail::gradient_all_reduce<in, typename L::w_out>(sys, w_out_used, bpe);

  e.state_bytes = (w_in + w_out) * bytes_per_parameter;
  e.gathered_bytes = std::max(w_in_used, w_out_used) * bpe;
  e.activation_bytes =
      (b * d / shard_count<in>(sys.mesh) + b * f / shard_count<tmp>(sys.mesh)) * bpe;
  return e;
}

// The layouts by name, for programs that choose among them at run time.
inline constexpr std::string_view layout_names[] = {"dp", "fsdp", "tp", "fsdp_tp"};

template <class Sys>
constexpr layer_estimate predict_layer(std::string_view layout_name, const Sys& sys, shape s,
                                       double bpe, double bytes_per_parameter = 16) {
  if (layout_name == "dp") return predict_layer<dp>(sys, s, bpe, bytes_per_parameter);
  if (layout_name == "fsdp") return predict_layer<fsdp>(sys, s, bpe, bytes_per_parameter);
  if (layout_name == "tp") return predict_layer<tp>(sys, s, bpe, bytes_per_parameter);
  return predict_layer<fsdp_tp>(sys, s, bpe, bytes_per_parameter);
}

}  // namespace tpx::cost::mlp

// A pipeline stage with tensor parallelism inside it: the notes' MLP block, x <- x + GELU(x W_in)
// W_out, W_in [D, F] split by columns over mesh axis Y and W_out [F, D] by rows (Megatron-LM's
// pair: the hidden activation stays split over Y, and one all-reduce over Y per block joins the
// ranks' partial outputs, another their partial input gradients), FSDP and data parallelism over
// X, stages over P: all three of the seeds' ways of cutting a model at once.
// tests/unit/pipeline_3d_test.cpp trains it through nn::run_pipeline (include/tpx/nn/pipeline.hpp)
// in every schedule and checks it against the whole model; examples/pipeline/residual_stack.hpp
// is the same kind of stage without Y, and says more about writing one.
//
//   TPX_MESH_AXES(P, X, Y);  TPX_DIMS(S, B, D, F);
//   x     [S_P, B_X, D]      a microbatch's rows on the stage, split over X, whole on Y's ranks
//   W_in  [S_P, D_X, F_Y]    block s: layer i of stage s; all-gathered over X for the step
//   W_out [S_P, F_Y, D_X]
//   a = x *_D W_in           [S_P, B_X, F_Y]       no communication: F stays split
//   o = GELU(a) *_F W_out    [S_P, B_X, D]{U_Y}    a partial sum over Y, all-reduced
//
// The types say each step's collective (the static_asserts below): the contraction over the
// split F leaves a partial sum over Y, and each weight gradient, contracted over the rows split
// over X, comes back reduce-scattered onto the weight's FSDP shard. What a microbatch's backward
// and weight steps need (each block's input x and pre-activation a, then the gradients of its
// output and of a) is kept by forward and backward and freed by the weight step.
#pragma once

#include <optional>
#include <tpx/nn/pipeline_schedule.hpp>
#include <tpx/tpx.hpp>
#include <type_traits>
#include <utility>
#include <vector>

namespace pipeline_3d_example {

TPX_MESH_AXES(P, X, Y);  // P: pipeline stages; X: FSDP and data parallelism; Y: tensor parallelism
TPX_DIMS(S, B, D, F);    // stage, rows, width, the MLP's hidden width

template <class Space>
struct mlp_stage {
  template <class... Spec>
  using tensor = tpx::BasicTensor<Space, float, Spec...>;
  using rows = tensor<S<P>, B<X>, D<>>;
  using hidden = tensor<S<P>, B<X>, F<Y>>;
  using weight_in = tensor<S<P>, D<X>, F<Y>>;
  using weight_out = tensor<S<P>, F<Y>, D<X>>;
  static_assert(
      std::is_same_v<decltype(tpx::einsum<F>(std::declval<const hidden&>(),
                                             std::declval<const tensor<S<P>, F<Y>, D<>>&>())),
                     tensor<S<P>, B<X>, D<>, tpx::Unreduced<Y>>>,
      "a block's output, contracted over the split F, is a partial sum over Y");
  static_assert(std::is_same_v<decltype(tpx::reduce_scatter<X, D>(tpx::einsum<B>(
                                   std::declval<const rows&>(), std::declval<const hidden&>()))),
                               weight_in>,
                "W_in's gradient comes reduce-scattered onto its FSDP shard");
  static_assert(std::is_same_v<decltype(tpx::reduce_scatter<X, D>(tpx::einsum<B>(
                                   std::declval<const hidden&>(), std::declval<const rows&>()))),
                               weight_out>,
                "W_out's gradient comes reduce-scattered onto its FSDP shard");

  std::vector<weight_in> w_in, grad_in;
  std::vector<weight_out> w_out, grad_out;
  std::vector<tensor<S<P>, D<>, F<Y>>> gathered_in;  // the weights whole over X, for the step
  std::vector<tensor<S<P>, F<Y>, D<>>> gathered_out;
  // By microbatch, by block: the input and the pre-activation (forward), the output's gradient
  // and the pre-activation's (backward, the last block's first).
  std::vector<std::vector<rows>> inputs, output_grads;
  std::vector<std::vector<hidden>> pre, pre_grads;
  std::vector<std::optional<rows>> outputs;  // the last piece's, by microbatch
  bool last;                                 // whether its blocks end the model

  // The blocks of chunk `chunk` of this rank's stage under `plan`.
  mlp_stage(const tpx::rank_context& rank, std::vector<weight_in> in, std::vector<weight_out> out,
            const tpx::nn::pipeline_schedule& plan, int chunk = 0)
      : w_in(std::move(in)),
        w_out(std::move(out)),
        inputs(plan.microbatches()),
        output_grads(plan.microbatches()),
        pre(plan.microbatches()),
        pre_grads(plan.microbatches()),
        outputs(plan.microbatches()),
        last(plan.piece(rank.axis<P>().coord, chunk) == plan.pieces() - 1) {
    for (const weight_in& w : w_in) grad_in.emplace_back(rank, w.shape());
    for (const weight_out& w : w_out) grad_out.emplace_back(rank, w.shape());
  }

  void gather() {
    gathered_in.clear();
    gathered_out.clear();
    for (const weight_in& w : w_in) gathered_in.push_back(tpx::all_gather<X>(w));
    for (const weight_out& w : w_out) gathered_out.push_back(tpx::all_gather<X>(w));
  }
  void release() {
    gathered_in.clear();
    gathered_out.clear();
  }

  rows forward(int m, rows x) {
    for (std::size_t i = 0; i < gathered_in.size(); ++i) {
      hidden a = tpx::einsum<D>(x, gathered_in[i]);
      rows next = x + tpx::all_reduce<Y>(
                          tpx::einsum<F>(tpx::map(tpx::kernels::gelu{}, a), gathered_out[i]));
      inputs[m].push_back(std::move(x));
      pre[m].push_back(std::move(a));
      x = std::move(next);
    }
    if (last) outputs[m] = x;
    return x;
  }

  // The input gradient from the output's (the backward step): through each block from the last,
  // dx = dy + (GELU'(a) (dy *_D W_out^T)) *_F W_in^T, the second term all-reduced over Y. Each
  // block's dy and da are kept, the last block's first.
  rows backward(int m, rows dy) {
    for (std::size_t i = gathered_in.size(); i-- > 0;) {
      hidden da =
          tpx::map(tpx::kernels::gelu_backward{}, pre[m][i], tpx::einsum<D>(dy, gathered_out[i]));
      rows dx = dy + tpx::all_reduce<Y>(tpx::einsum<F>(da, gathered_in[i]));
      output_grads[m].push_back(std::move(dy));
      pre_grads[m].push_back(std::move(da));
      dy = std::move(dx);
    }
    outputs[m].reset();
    return dy;
  }

  // Adds microbatch m's weight gradients (the weight step) and frees what it kept.
  void weight_gradient(int m) {
    const std::size_t blocks = w_in.size();
    for (std::size_t i = 0; i < blocks; ++i) {
      const rows& dy = output_grads[m][blocks - 1 - i];  // kept from the last block
      const hidden& da = pre_grads[m][blocks - 1 - i];
      grad_out[i] = grad_out[i] + tpx::reduce_scatter<X, D>(tpx::einsum<B>(
                                      tpx::map(tpx::kernels::gelu{}, pre[m][i]), dy));
      grad_in[i] = grad_in[i] + tpx::reduce_scatter<X, D>(tpx::einsum<B>(inputs[m][i], da));
    }
    inputs[m].clear();
    pre[m].clear();
    output_grads[m].clear();
    pre_grads[m].clear();
  }
};

}  // namespace pipeline_3d_example

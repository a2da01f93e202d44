// A stage of a pipeline, as nn::run_pipeline (include/tpx/nn/pipeline.hpp) takes one: a residual
// stack x <- x + GELU(x W), W [D, D], cut into stages of consecutive layers over mesh axis P, with
// FSDP and data parallelism over X inside each stage. The tests (tests/unit/pipeline_test.cpp,
// the CUDA mesh test) and tpx-bench-pipeline run it; it is also the shortest complete example of
// writing a stage:
//
//   TPX_MESH_AXES(P, X);  TPX_DIMS(S, B, D, E);
//   residual_stage<Space> st(rank, weights, schedule); // weights[i]: [S_P, D_X, E], this
//   st.gather();                                       //   stage's layer i in block s
//   tpx::nn::run_pipeline<P, S>(like, schedule,
//       [&](int m, rows in) { return st.forward(m, first ? batch(m) : std::move(in)); },
//       [&](int m, rows d) { return st.backward(m, last ? loss_gradient(m) : std::move(d)); },
//       [&](int m) { st.weight_gradient(m); });
//   st.release();
//
// Every tensor carries the stage dim S split over P: the rows [S_P, B_X, D] (a microbatch's rows
// on the stage, split over X), each layer's weight [S_P, D_X, E] (layer s * L/P + i of the stack
// is block s of the stage's weight i) and its product [S_P, B_X, E]. The weights are all-gathered
// over X once for the step (gather() before the pipeline runs, release() after), not for each
// microbatch, which would move every weight 2M times a step; each microbatch's weight gradient
// comes back reduce-scattered onto the weight's FSDP shard, as the types say (the static_assert
// below). E names the layer's output width (D again) so that x and
// x W can be told apart; rename turns one into the other. What the backward pass needs of a
// microbatch (every layer's input and product, and the last stage's output) is kept by forward
// and freed by the weight step, which needs the inputs and the products' gradients (the
// backward step's by-products), so a schedule's activations in flight show in the rank's memory.
// backward and weight_gradient are the two halves of the backward pass that a zero-bubble
// schedule runs at different ticks; other schedules run them one after the other.
#pragma once

#include <cstddef>
#include <optional>
#include <tpx/nn/pipeline_schedule.hpp>
#include <tpx/tpx.hpp>
#include <type_traits>
#include <utility>
#include <vector>

namespace pipeline_example {

TPX_MESH_AXES(P, X);   // P: pipeline stages; X: FSDP and data parallelism inside a stage
TPX_DIMS(S, B, D, E);  // stage, rows, width, a layer's output width

template <class Space>
struct residual_stage {
  template <class... Spec>
  using tensor = tpx::BasicTensor<Space, float, Spec...>;
  using rows = tensor<S<P>, B<X>, D<>>;
  using product = tensor<S<P>, B<X>, E<>>;
  using weight = tensor<S<P>, D<X>, E<>>;
  static_assert(std::is_same_v<decltype(tpx::reduce_scatter<X, D>(tpx::einsum<B>(
                                   std::declval<const rows&>(), std::declval<const product&>()))),
                               weight>,
                "a weight's gradient comes reduce-scattered onto the weight's FSDP shard");

  std::vector<weight> weights, grads;
  std::vector<tensor<S<P>, D<>, E<>>> gathered;  // the weights whole over X, for the step
  std::vector<std::vector<rows>> inputs;         // by microbatch, by layer
  std::vector<std::vector<product>> products;    // x W, after backward its gradient
  std::vector<std::optional<rows>> outputs;      // the last stage's, by microbatch
  bool last;                                     // whether its layers end the stack

  // The layers of chunk `chunk` of this rank's stage under `plan` (a stage holds one chunk but
  // under the interleaved and zero-bubble V schedules, each a residual_stage); the chunk that runs
  // the plan's last piece ends the stack.
  residual_stage(const tpx::rank_context& rank, std::vector<weight> stage_weights,
                 const tpx::nn::pipeline_schedule& plan, int chunk = 0)
      : weights(std::move(stage_weights)),
        inputs(plan.microbatches()),
        products(plan.microbatches()),
        outputs(plan.microbatches()),
        last(plan.piece(rank.axis<P>().coord, chunk) == plan.pieces() - 1) {
    for (const weight& w : weights) grads.emplace_back(rank, w.shape());
  }

  // The step's weights, all-gathered over X; and their release after the step.
  void gather() {
    gathered.clear();
    for (const weight& w : weights) gathered.push_back(tpx::all_gather<X>(w));
  }
  void release() { gathered.clear(); }

  // x <- x + GELU(x W) through the stage's layers.
  rows forward(int m, rows x) {
    for (const auto& w : gathered) {
      product xw = tpx::einsum<D>(x, w);
      rows next = x + tpx::rename<E, D>(tpx::map(tpx::kernels::gelu{}, xw));
      inputs[m].push_back(std::move(x));
      products[m].push_back(std::move(xw));
      x = std::move(next);
    }
    if (last) outputs[m] = x;
    return x;
  }

  // The stage's input gradient from its output's (the backward step); each layer's product is
  // replaced by its gradient, which the weight step reads.
  rows backward(int m, rows dx) {
    for (std::size_t i = weights.size(); i-- > 0;) {
      product dxw = tpx::rename<D, E>(tpx::map(tpx::kernels::gelu_backward{},
                                               tpx::rename<E, D>(std::move(products[m][i])), dx));
      dx = dx + tpx::einsum<E>(dxw, gathered[i]);
      products[m][i] = std::move(dxw);
    }
    outputs[m].reset();
    return dx;
  }

  // Adds microbatch m's weight gradients to grads (the weight step), and frees what the
  // microbatch kept.
  void weight_gradient(int m) {
    for (std::size_t i = 0; i < weights.size(); ++i)
      grads[i] = grads[i] + tpx::reduce_scatter<X, D>(tpx::einsum<B>(inputs[m][i], products[m][i]));
    inputs[m].clear();
    products[m].clear();
  }
};

}  // namespace pipeline_example

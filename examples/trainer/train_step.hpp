// One training step of the example trainers, for any model family (training.hpp): forward,
// backward, clipping by the global gradient norm, AdamW. train_on_batch is the step on a batch
// already in the step's memory space, with AdamW's step number either a host int or a float
// scalar in that space, which a step recorded once and replayed reads there
// (recorded_training.hpp); train_step loads the batch of a step number first. Everything runs in
// the space; the only copy is the batch's. The step marks its phases (tpx::mark_phase), which
// --profile-phases times.
#pragma once

#include <optional>
#include <string>
#include <tpx/nn/adamw.hpp>
#include <tpx/nn/global_norm.hpp>
#include <tpx/ops/elementwise.hpp>
#include <tpx/spmd/phase_clock.hpp>
#include <utility>

#include "run_options.hpp"
#include "text_data.hpp"

namespace trainer {

// The loss and squared gradient norm of one step, scalars in the step's memory space.
template <class Space>
struct step_result {
  tpx::BasicTensor<Space, float> loss;
  tpx::BasicTensor<Space, float> grad_norm2;
};

// One step on `tokens`, AdamW at step number t (counting from 1: an int, or a float scalar in
// Space).
template <class Family, class Network, template <class> class Tensors, class Space, class Batch,
          class StepNumber>
step_result<Space> train_on_batch(Network& net, const run_options<Family>& o, const Batch& tokens,
                                  const StepNumber& t, Tensors<Space>& params,
                                  Tensors<Space>& grads, Tensors<Space>& m, Tensors<Space>& v) {
  tpx::mark_phase("forward and backward");  // a model may mark its own phases inside
  auto loss = net.forward_backward(params, tokens, grads);
  tpx::mark_phase("gradient norm");
  std::optional<tpx::BasicTensor<Space, float>> norm2;
  grads.for_each([&](const std::string&, const auto& g) {
    auto n = tpx::nn::squared_norm(g);
    norm2 = norm2 ? tpx::add(*norm2, n) : std::move(n);
  });
  const auto scale = tpx::nn::clip_factor(*norm2, o.clip);
  const tpx::nn::adamw_config adam{o.lr, 0.9f, 0.95f, 1e-8f, o.weight_decay};
  tpx::mark_phase("AdamW");
  params.for_each([&](const std::string&, auto& p, auto& g, auto& pm,
                      auto& pv) { tpx::nn::adamw_step(p, g, pm, pv, adam, t, scale); },
                  grads, m, v);
  tpx::mark_phase("");  // what runs between steps (a report) is no phase of the step
  return {std::move(loss), std::move(*norm2)};
}

// Training step `step` (counting from 0) on its batch.
template <class Family, class Network, template <class> class Tensors, class Space>
step_result<Space> train_step(const tpx::rank_context& rank, Network& net,
                              const run_options<Family>& o, const text_data& data, int step,
                              Tensors<Space>& params, Tensors<Space>& grads, Tensors<Space>& m,
                              Tensors<Space>& v) {
  tpx::mark_phase("batch upload");
  return train_on_batch(net, o, Family::template load_batch<Space>(rank, data, o.model, step),
                        step + 1, params, grads, m, v);
}

}  // namespace trainer

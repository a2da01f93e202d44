// Pipeline parallelism over a mesh axis, in SPMD form: GPipe's schedule (Huang et al. 2019: every
// microbatch forward, then every microbatch backward) run by all ranks in lockstep, the
// activations passed from stage to stage by tpx::roll (ops/roll.hpp), as JAX's shard_map
// pipelines pass them with ppermute.
//
// A model of L layers is cut into P stages of consecutive layers; stage s is the ranks whose
// coordinate along mesh axis P is s (the seeds' "split on the L dimension"). Every tensor a stage
// computes carries a stage dim S split over P (extent P, one block per stage), so that its type
// tells the truth: its blocks differ from stage to stage, where a [B, D] without S would claim
// to be the same on every stage. A stage's weights are stacked the same way: layer i of stage s
// is block s of a [S_P, ...] tensor. The other mesh axes work inside a stage as anywhere (FSDP's
// gathers over X, tensor parallelism over Y): a stage's ranks run the same microbatch at the same
// tick, so their collectives match.
//
// The caller gives its stage's two functions, on tensors of the type of `like` ([S_P, ...]):
//   forward(m, in)    the stage's output for microbatch m from `in`, the previous stage's
//                     output; stage 0 gets zeros (it reads microbatch m itself), and the last
//                     stage's output goes nowhere (it computes the loss; return anything)
//   backward(m, dout) the gradient of the stage's input from the gradient of its output; the
//                     last stage gets zeros (it starts from its loss), stage 0's result goes
//                     nowhere; the stage adds its weights' gradients wherever it keeps them
// and gpipe runs M microbatches forward, then backward, M + P - 1 ticks each (pipeline_schedule):
//
//   forward tick t    stage s runs microbatch t - s (if it is one of 0 .. M-1), then the outputs
//                     roll one stage on, s to s + 1
//   backward tick t   stage s runs microbatch t - (P - 1 - s), then the input gradients roll one
//                     stage back, s to s - 1
//
// so each stage idles P - 1 ticks of each pass: the bubble, (P - 1) / (M + P - 1) of the step
// (seed 001, "Reducing the pipeline overheads"). An idle stage passes on what it received
// untouched, which the next stage, idle at the next tick, ignores; the roll's wrap-around (the
// last stage to stage 0, and back) carries one block that no stage reads. Every microbatch's
// activations stay until its backward pass (the caller keeps them, GPipe's memory; 1F1B, which
// keeps at most P, is a schedule for later).
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tpx/ops/roll.hpp"

namespace tpx::nn {

// Which microbatch each stage runs at each tick of GPipe's two passes.
struct pipeline_schedule {
  int stages;
  int microbatches;

  pipeline_schedule(int stages_, int microbatches_) : stages(stages_), microbatches(microbatches_) {
    if (stages < 1 || microbatches < 1)
      throw std::invalid_argument("tpx: pipeline of " + std::to_string(stages) + " stages and " +
                                  std::to_string(microbatches) +
                                  " microbatches: it takes at least one of each");
  }

  int ticks() const { return microbatches + stages - 1; }
  // The microbatch stage `stage` runs at forward tick `tick`, -1 when it idles.
  int forward_microbatch(int stage, int tick) const { return within(tick - stage); }
  // The same for the backward pass: the last stage starts it.
  int backward_microbatch(int stage, int tick) const {
    return within(tick - (stages - 1 - stage));
  }
  // The share of each pass's ticks a stage idles.
  double bubble() const { return static_cast<double>(stages - 1) / ticks(); }

 private:
  int within(int m) const { return m >= 0 && m < microbatches ? m : -1; }
};

namespace detail {

// The activations' stage dim: S, split over P alone (one block per stage).
template <MeshAxis P, Dim S, AnyTensor Tn>
constexpr bool check_stage_dim() {
  constexpr int k = tpx::detail::checked_dim_position<Tn, S>();
  if constexpr (k >= 0) {
    if constexpr (!std::is_same_v<typename type_at_t<k, typename Tn::dims>::axes, type_list<P>>)
      compile_error<"tpx: gpipe<" + P::name + ", " + S::name + ">: stage dim " + S::name +
                    " of " + Tn::notation + " must be split over mesh axis " + P::name +
                    " alone (one block per stage)">{};
  }
  return k >= 0;
}

}  // namespace detail

template <MeshAxis P, Dim S, AnyTensor Tn, class Forward, class Backward>
pipeline_schedule gpipe(const Tn& like, int microbatches, Forward&& forward, Backward&& backward) {
  static_assert(detail::check_stage_dim<P, S, Tn>());
  static_assert(std::is_same_v<std::invoke_result_t<Forward&, int, Tn>, Tn> &&
                    std::is_same_v<std::invoke_result_t<Backward&, int, Tn>, Tn>,
                "tpx: gpipe: forward(m, in) and backward(m, dout) take and return tensors of the "
                "type of `like`");
  const rank_context& ctx = like.context();
  const pipeline_schedule plan(ctx.template axis<P>().size, microbatches);
  const int stage = ctx.template axis<P>().coord;
  constexpr int k = tpx::detail::checked_dim_position<Tn, S>();
  if (like.global_extent(k) != plan.stages)
    throw std::invalid_argument(std::string("tpx: gpipe<") + P::name.c_str() + ", " +
                                S::name.c_str() + ">: stage dim " + S::name.c_str() + " of " +
                                Tn::notation.c_str() + " has extent " +
                                std::to_string(like.global_extent(k)) + " but mesh axis " +
                                P::name.c_str() + " has " + std::to_string(plan.stages) +
                                " stages: give it one element per stage");
  const auto zeros = [&] { return Tn(ctx, like.shape()); };

  Tn passed = zeros();
  for (int tick = 0; tick < plan.ticks(); ++tick) {
    if (const int m = plan.forward_microbatch(stage, tick); m >= 0)
      passed = forward(m, stage == 0 ? zeros() : std::move(passed));
    passed = roll<P, S>(std::move(passed), 1);
  }
  passed = zeros();
  for (int tick = 0; tick < plan.ticks(); ++tick) {
    if (const int m = plan.backward_microbatch(stage, tick); m >= 0)
      passed = backward(m, stage == plan.stages - 1 ? zeros() : std::move(passed));
    passed = roll<P, S>(std::move(passed), -1);
  }
  return plan;
}
template <MeshAxis P, template <class...> class S, AnyTensor Tn, class Forward, class Backward>
pipeline_schedule gpipe(const Tn& like, int microbatches, Forward&& forward, Backward&& backward) {
  return gpipe<P, S<>>(like, microbatches, std::forward<Forward>(forward),
                       std::forward<Backward>(backward));
}

}  // namespace tpx::nn

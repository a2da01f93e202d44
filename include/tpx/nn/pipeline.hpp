// Pipeline parallelism over a mesh axis, in SPMD form: a schedule of forward and backward passes
// of microbatches, run by all ranks in lockstep, the activations passed from stage to stage as
// JAX's shard_map pipelines pass them with ppermute (tpx::roll's exchange, ops/roll.hpp, without
// its wrap-around).
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
// The caller gives its stage's functions, on tensors of the type of `like` ([S_P, ...]):
//   forward(m, in)    the stage's output for microbatch m from `in`, the previous stage's
//                     output; stage 0 gets zeros (it reads microbatch m itself), and the last
//                     stage's output goes nowhere (it computes the loss; return anything)
//   backward(m, dout) the gradient of the stage's input from the gradient of its output; the
//                     last stage gets zeros (it starts from its loss), stage 0's result goes
//                     nowhere; the stage adds its weights' gradients wherever it keeps them
// or, given a third function, backward computes the input gradient alone and
//   weight(m)         adds the stage's weight gradients of microbatch m, from what backward
//                     left (the schedule's weight step under zero_bubble; right after backward
//                     under the other orders)
// and run_pipeline runs them in the order of a pipeline_schedule, one step per stage per tick
// (a forward, a backward, a weight step, or nothing: the bubble), after which the outputs of the
// tick's forwards move one stage on and the input gradients of its backwards one stage back: per
// direction one all_to_all over P in which only the stages that send have a count (NCCL: a
// grouped send and receive between neighbours; a direction no stage sends in at that tick makes
// no call), so the last stage's outputs and stage 0's input gradients stay where they are and an
// idle stage, or one taking a weight step, sends nothing. Under an interleaved schedule a
// microbatch passes the stages once per chunk: the last stage's output of chunk c goes on to
// stage 0's chunk c + 1, and stage 0's input gradient of chunk c back to the last stage's c - 1. A
// stage keeps what it receives until its step for that microbatch comes. The schedules (GPipe,
// 1F1B, zero-bubble, interleaved) and their bubble and memory are in nn/pipeline_schedule.hpp;
// each moves each microbatch's activation and its gradient once across each boundary between
// pieces of the model (P - 1 of them, v P - 1 with v chunks per stage).
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpx/nn/pipeline_schedule.hpp"
#include "tpx/ops/collectives.hpp"

namespace tpx::nn {

namespace detail {

// The activations' stage dim: S, split over P alone (one block per stage).
template <MeshAxis P, Dim S, AnyTensor Tn>
constexpr bool check_stage_dim() {
  constexpr int k = tpx::detail::checked_dim_position<Tn, S>();
  if constexpr (k >= 0) {
    if constexpr (!std::is_same_v<typename type_at_t<k, typename Tn::dims>::axes, type_list<P>>)
      compile_error<"tpx: pipeline<" + P::name + ", " + S::name + ">: stage dim " + S::name +
                    " of " + Tn::notation + " must be split over mesh axis " + P::name +
                    " alone (one block per stage)">{};
  }
  return k >= 0;
}

// One tick's passing in one direction (+1: on to the next stage, -1: back to the previous one,
// the last stage's next being stage 0 under an interleaved schedule): `sends[s]` says whether
// stage s sends; this stage sends `sent` if it does (else `sent` stays here), and gets back what
// its neighbour on the other side sent, if it did. One all_to_all over P whose only nonzero
// counts are the senders' (NCCL: a grouped send and receive between neighbours), so nothing
// else moves: no idle stage sends, and nothing wraps around unless the schedule says so.
template <MeshAxis P, AnyTensor Tn>
std::optional<Tn> pass_along(const Tn& like, std::optional<Tn> sent, const std::vector<bool>& sends,
                             int direction) {
  const rank_context& ctx = like.context();
  any_communicator& comm = ctx.template group<P>();
  const int n = comm.size(), me = comm.rank(), from = (me - direction + n) % n;
  const auto block = static_cast<std::size_t>(like.size());
  std::vector<std::size_t> counts(static_cast<std::size_t>(n) * n, 0);
  for (int s = 0; s < n; ++s)
    if (sends[s]) counts[s * n + (s + direction + n) % n] = block;
  std::optional<Tn> received;
  if (sends[from]) received.emplace(ctx, like.shape(), for_overwrite);
  using V = typename Tn::value_type;
  comm.all_to_all(sends[me] ? std::as_const(*sent).elements() : std::span<const V>(),
                  received ? received->elements() : std::span<V>(), counts);
  return received;
}

// A stage's forward or backward function: (m, in) or, for an interleaved schedule's chunks,
// (m, chunk, in), taking and returning a Tn.
template <class F, class Tn>
concept stage_pass = std::is_same_v<std::invoke_result_t<F&, int, Tn>, Tn> ||
    std::is_same_v<std::invoke_result_t<F&, int, int, Tn>, Tn>;

template <class F>
concept weight_pass = std::is_invocable_v<F&, int> || std::is_invocable_v<F&, int, int>;

// Whether f takes the chunk (for a weight function, Tn is void).
template <class F, class Tn>
constexpr bool takes_chunk() {
  if constexpr (std::is_void_v<Tn>)
    return std::is_invocable_v<F&, int, int>;
  else
    return std::is_invocable_v<F&, int, int, Tn>;
}

template <class F, class Tn>
Tn call_pass(F& f, const pipeline_step& step, Tn in) {
  if constexpr (takes_chunk<F, Tn>())
    return f(step.microbatch, step.chunk, std::move(in));
  else
    return f(step.microbatch, std::move(in));
}

template <class F>
void call_weight(F& f, const pipeline_step& step) {
  if constexpr (takes_chunk<F, void>())
    f(step.microbatch, step.chunk);
  else
    f(step.microbatch);
}

}  // namespace detail

// run_pipeline<P, S>(like, schedule, forward, backward) with a backward that also adds the weight
// gradients, or run_pipeline<P, S>(like, schedule, forward, backward, weight) with the weight
// gradients in weight(m) (which a zero_bubble schedule needs). Under an interleaved schedule each
// function takes the chunk after the microbatch: forward(m, chunk, in), backward(m, chunk, dout),
// weight(m, chunk).
template <MeshAxis P, Dim S, AnyTensor Tn, class Forward, class Backward, class... Weight>
void run_pipeline(const Tn& like, const pipeline_schedule& plan, Forward&& forward,
                  Backward&& backward, Weight&&... weight) {
  static_assert(detail::check_stage_dim<P, S, Tn>());
  static_assert(detail::stage_pass<Forward, Tn> && detail::stage_pass<Backward, Tn>,
                "tpx: pipeline: forward(m, [chunk,] in) and backward(m, [chunk,] dout) take and "
                "return tensors of the type of `like`");
  static_assert(sizeof...(Weight) <= 1 && (detail::weight_pass<Weight> && ...),
                "tpx: pipeline: the one function after backward is weight(m, [chunk])");
  const rank_context& ctx = like.context();
  const auto& axis = ctx.template axis<P>();
  const auto who = [] {  // the errors' prefix, made only when one is thrown
    return std::string("tpx: pipeline<") + P::name.c_str() + ", " + S::name.c_str() + ">: ";
  };
  if (plan.stages() != axis.size)
    throw std::invalid_argument(who() + "a schedule of " + std::to_string(plan.stages()) +
                                " stages on mesh axis " + P::name.c_str() + " of " +
                                std::to_string(axis.size) + " ranks");
  if (sizeof...(Weight) == 0 && plan.splits_backward())
    throw std::invalid_argument(who() +
                                "a zero-bubble schedule splits each backward into the input "
                                "gradient and the weight gradient: give run_pipeline a weight(m) "
                                "function after backward");
  constexpr bool all_take_chunk = detail::takes_chunk<Forward, Tn>() &&
                                  detail::takes_chunk<Backward, Tn>() &&
                                  (detail::takes_chunk<Weight, void>() && ...);
  if (plan.chunks() > 1 && !all_take_chunk)
    throw std::invalid_argument(
        who() + "an interleaved schedule runs " + std::to_string(plan.chunks()) +
        " chunks of layers per stage: give each function the chunk, "
        "forward(m, chunk, in), backward(m, chunk, dout), weight(m, chunk)");
  constexpr int k = tpx::detail::checked_dim_position<Tn, S>();
  if (like.global_extent(k) != axis.size)
    throw std::invalid_argument(
        who() + "stage dim " + S::name.c_str() + " of " + Tn::notation.c_str() + " has extent " +
        std::to_string(like.global_extent(k)) + " but mesh axis " + P::name.c_str() + " has " +
        std::to_string(axis.size) + " stages: give it one element per stage");
  const int stage = axis.coord, last = axis.size - 1, last_chunk = plan.chunks() - 1;
  const auto zeros = [&] { return Tn(ctx, like.shape()); };
  // What this stage received and has not used yet, by chunk and microbatch: activations from
  // the previous piece of the model (stage - 1, or the last stage's previous chunk for stage 0),
  // gradients from the next.
  const auto slot = [&](int chunk, int m) { return chunk * plan.microbatches() + m; };
  std::vector<std::optional<Tn>> inputs(plan.chunks() * plan.microbatches()),
      gradients(plan.chunks() * plan.microbatches());
  const auto taken = [](std::optional<Tn>& from) {
    Tn t = std::move(*from);
    from.reset();
    return t;
  };
  for (int tick = 0; tick < plan.ticks(); ++tick) {
    const pipeline_step& step = plan.at(stage, tick);
    const int m = step.microbatch;
    std::optional<Tn> onward, back;  // this tick's results for the next and the previous piece
    if (step.what == pipeline_step::forward) {
      onward = detail::call_pass(
          forward, step,
          stage == 0 && step.chunk == 0 ? zeros() : taken(inputs[slot(step.chunk, m)]));
    } else if (step.what == pipeline_step::backward) {
      back = detail::call_pass(backward, step,
                               stage == last && step.chunk == last_chunk
                                   ? zeros()
                                   : taken(gradients[slot(step.chunk, m)]));
      if (!plan.splits_backward()) (detail::call_weight(weight, step), ...);
    } else if (step.what == pipeline_step::weight) {
      (detail::call_weight(weight, step), ...);
    }
    // Each direction moves when some stage sends in it (every rank reads the same schedule).
    std::vector<bool> sends_on(axis.size, false), sends_back(axis.size, false);
    for (int s = 0; s <= last; ++s) {
      const bool forward_step = plan.at(s, tick).what == pipeline_step::forward;
      sends_on[s] = forward_step && plan.passes(s, tick);
      sends_back[s] = !forward_step && plan.passes(s, tick);
    }
    // A block from the last stage to stage 0 goes on to the next chunk, and back the other way
    // to the previous one.
    if (std::find(sends_on.begin(), sends_on.end(), true) != sends_on.end())
      if (std::optional<Tn> got = detail::pass_along<P>(like, std::move(onward), sends_on, 1)) {
        const pipeline_step& sent = plan.at((stage + last) % axis.size, tick);
        inputs[slot(sent.chunk + (stage == 0), sent.microbatch)] = std::move(got);
      }
    if (std::find(sends_back.begin(), sends_back.end(), true) != sends_back.end())
      if (std::optional<Tn> got = detail::pass_along<P>(like, std::move(back), sends_back, -1)) {
        const pipeline_step& sent = plan.at((stage + 1) % axis.size, tick);
        gradients[slot(sent.chunk - (stage == last), sent.microbatch)] = std::move(got);
      }
  }
}
template <MeshAxis P, template <class...> class S, AnyTensor Tn, class Forward, class Backward,
          class... Weight>
void run_pipeline(const Tn& like, const pipeline_schedule& plan, Forward&& forward,
                  Backward&& backward, Weight&&... weight) {
  run_pipeline<P, S<>>(like, plan, std::forward<Forward>(forward), std::forward<Backward>(backward),
                       std::forward<Weight>(weight)...);
}

}  // namespace tpx::nn

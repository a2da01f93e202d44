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
//                     output; the first piece of the model (stage 0) gets zeros (it reads
//                     microbatch m itself), and the last piece's output (the last stage's, but
//                     stage 0's under zero_bubble_v) goes nowhere (it computes the loss; return
//                     anything). A loss over the [S_P, ...] rows keeps S: nn::cross_entropy_per<S>
//                     (nn/cross_entropy.hpp) gives a loss per stage block with collectives over
//                     the stage's other axes only, where a mean over S would all-reduce over P,
//                     which the other stages do not reach at that tick
//   backward(m, dout) the gradient of the stage's input from the gradient of its output; the
//                     last piece gets zeros (it starts from its loss), the first piece's result
//                     goes nowhere; the stage adds its weights' gradients wherever it keeps them
// or, given a third function, backward computes the input gradient alone and
//   weight(m)         adds the stage's weight gradients of microbatch m, from what backward
//                     left (the schedule's weight step under the zero-bubble orders; right after
//                     backward under the other orders)
// and run_pipeline runs them in the order of a pipeline_schedule, one step per stage per tick
// (a forward, a backward, a weight step, or nothing: the bubble), after which the outputs of the
// tick's forwards move on to the stage of the next piece of the model and the input gradients of
// its backwards back to the previous piece's: at most two all_to_all over P a tick (to the next
// stage round the ring, to the previous), in which only the stages that send have a count (NCCL:
// a grouped send and receive between neighbours; a call in which no stage sends is not made), so
// the last piece's outputs and the first piece's input gradients stay where they are, an idle
// stage or one taking a weight step sends nothing, and a block for another chunk of the same
// stage stays there without a pass. With several chunks per stage (interleaved, zero_bubble_v) a
// microbatch passes the stages once per chunk, and each function takes the chunk after the
// microbatch: under interleaved the last stage's output of chunk c goes on to stage 0's chunk
// c + 1; under zero_bubble_v's V it goes down the stages through chunk 0, turns on the last stage
// and comes back up through chunk 1 to stage 0, which starts and ends the model. A stage keeps
// what it receives until its step for that microbatch comes.
//
// run_pipeline<P, S>(like, schedule, pipeline_passes::in_background, forward, ...) starts each
// tick's passes on the rank's communication thread (tpx::in_background; a CUDA rank's second
// stream) and goes on to its next step, taking a pass's block only when a step needs it (the
// passes finish in the order they started): a stage computes while its blocks move, and the
// stages no longer meet at every tick, as Megatron-LM overlaps its point-to-point passes. Every
// rank starts the same passes in the same order, so the communication threads meet as the ranks'
// own threads would. A block may then arrive before the step that reads it, so a rank's peak
// memory depends on timing (a dry run's is that of the passes in the step, the default). The
// choice is a run-time value, so a program's --overlap flag passes it straight on.
//
// A block that goes on, to another stage or another chunk, must have the extents of `like`: one
// that has not is refused with a sentence naming the function, the microbatch, the chunk, the
// stage and both extents. The schedules (GPipe, 1F1B, zero-bubble, interleaved, zero-bubble V) and
// their bubble and memory are in nn/pipeline_schedule.hpp; each moves each microbatch's activation
// and its gradient once across each boundary between pieces of the model on different stages.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpx/nn/pipeline_schedule.hpp"
#include "tpx/ops/collectives.hpp"
#include "tpx/spmd/background.hpp"

namespace tpx::nn {

// Where run_pipeline's passes run: in the step (every stage meets at each tick in which one
// sends), or in the background (on the rank's communication thread or second stream, so that a
// stage computes on while its blocks move and waits only for a block its next step needs).
enum class pipeline_passes { in_step, in_background };

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

// One call's passing over P: stage s sends its block to stage to[s] (-1: it sends none in this
// call), at most one block reaching each stage; this stage sends `sent` if it sends (else `sent`
// stays here), and gets back what the stage that sends to it sent, if one does. One all_to_all
// over P whose only nonzero counts are the senders' (NCCL: a grouped send and receive between
// neighbours), so nothing else moves: no idle stage sends.
template <MeshAxis P, AnyTensor Tn>
std::optional<Tn> pass_along(const Tn& like, std::optional<Tn> sent, const std::vector<int>& to) {
  const rank_context& ctx = like.context();
  any_communicator& comm = ctx.template group<P>();
  const int n = comm.size(), me = comm.rank();
  const auto block = static_cast<std::size_t>(like.size());
  std::vector<std::size_t> counts(static_cast<std::size_t>(n) * n, 0);
  for (int s = 0; s < n; ++s)
    if (to[s] >= 0) counts[s * n + to[s]] = block;
  std::optional<Tn> received;
  if (std::find(to.begin(), to.end(), me) != to.end())
    received.emplace(ctx, like.shape(), for_overwrite);
  using V = typename Tn::value_type;
  comm.all_to_all(to[me] >= 0 ? std::as_const(*sent).elements() : std::span<const V>(),
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
// gradients in weight(m) (which the zero-bubble schedules need). Under a schedule of several chunks
// per stage (interleaved, zero_bubble_v) each function takes the chunk after the microbatch:
// forward(m, chunk, in), backward(m, chunk, dout), weight(m, chunk). With a pipeline_passes
// before the functions, run_pipeline<P, S>(like, schedule, passes, forward, ...), the passes run
// where it says (in the step without one; see the top of the file).
template <MeshAxis P, Dim S, AnyTensor Tn, class Forward, class Backward, class... Weight>
void run_pipeline(const Tn& like, const pipeline_schedule& plan, pipeline_passes passes,
                  Forward&& forward, Backward&& backward, Weight&&... weight) {
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
        who() + "the " + order_name(plan.order()) + " schedule runs " +
        std::to_string(plan.chunks()) +
        " chunks of layers per stage: give each function the chunk, "
        "forward(m, chunk, in), backward(m, chunk, dout), weight(m, chunk)");
  constexpr int k = tpx::detail::checked_dim_position<Tn, S>();
  if (like.global_extent(k) != axis.size)
    throw std::invalid_argument(
        who() + "stage dim " + S::name.c_str() + " of " + Tn::notation.c_str() + " has extent " +
        std::to_string(like.global_extent(k)) + " but mesh axis " + P::name.c_str() + " has " +
        std::to_string(axis.size) + " stages: give it one element per stage");
  const int stage = axis.coord, last_piece = plan.pieces() - 1;
  const auto zeros = [&] { return Tn(ctx, like.shape()); };
  // What this stage received and has not used yet, by chunk and microbatch: activations from
  // the previous piece of the model, gradients from the next.
  const auto slot = [&](int chunk, int m) { return chunk * plan.microbatches() + m; };
  std::vector<std::optional<Tn>> inputs(plan.chunks() * plan.microbatches()),
      gradients(plan.chunks() * plan.microbatches());
  // Keeps the block that stage `from`'s step at `tick` made for one of this stage's chunks.
  const auto keep = [&](int from, int tick, Tn block) {
    const pipeline_step& sent = plan.at(from, tick);
    const int piece = plan.piece(from, sent.chunk);
    if (sent.what == pipeline_step::forward)
      inputs[slot(plan.holder(piece + 1).chunk, sent.microbatch)] = std::move(block);
    else
      gradients[slot(plan.holder(piece - 1).chunk, sent.microbatch)] = std::move(block);
  };
  // Background passes started and not yet taken, oldest first: what each will bring and from
  // which stage's step at which tick (from -1: nothing for this stage). They finish in the order
  // they started (one communication thread, one stream), so a block is waited for by taking the
  // oldest until it is there.
  struct started_pass {
    int from, tick;
    pending<std::optional<Tn>> got;
  };
  std::deque<started_pass> started;
  const auto take_oldest = [&] {
    started_pass pass = std::move(started.front());
    started.pop_front();
    if (std::optional<Tn> got = pass.got.get()) keep(pass.from, pass.tick, std::move(*got));
  };
  // The block kept in `kept`, taken out of it once a pass has brought it.
  const auto taken = [&](std::optional<Tn>& kept) {
    while (!kept && !started.empty()) take_oldest();
    Tn block = std::move(*kept);
    kept.reset();
    return block;
  };
  for (int tick = 0; tick < plan.ticks(); ++tick) {
    const pipeline_step& step = plan.at(stage, tick);
    const int m = step.microbatch, piece = plan.piece(stage, step.chunk);
    std::optional<Tn> made;  // this tick's block for the next piece (forward) or the previous
    if (step.what == pipeline_step::forward) {
      made = detail::call_pass(forward, step,
                               piece == 0 ? zeros() : taken(inputs[slot(step.chunk, m)]));
    } else if (step.what == pipeline_step::backward) {
      made = detail::call_pass(
          backward, step, piece == last_piece ? zeros() : taken(gradients[slot(step.chunk, m)]));
      if (!plan.splits_backward()) (detail::call_weight(weight, step), ...);
    } else if (step.what == pipeline_step::weight) {
      (detail::call_weight(weight, step), ...);
    }
    if (plan.receiver(stage, tick) >= 0 && made->global_extents() != like.global_extents()) {
      std::string what = who();  // appended piece by piece: GCC 12's -Wrestrict at -O3
      what += step.what == pipeline_step::forward ? "forward(m = " : "backward(m = ";
      what += std::to_string(m);
      if (plan.chunks() > 1) {
        what += ", chunk ";
        what += std::to_string(step.chunk);
      }
      what += ") on stage ";
      what += std::to_string(stage);
      what += " returned extents ";
      what += tpx::detail::extents_text(made->global_extents());
      what += " where `like` has ";
      what += tpx::detail::extents_text(like.global_extents());
      what += ": every block passed between pieces of the model has the extents of `like`";
      throw std::invalid_argument(what);
    }
    // A block for another chunk of this stage stays (the V's turn, a one-stage pipeline).
    if (plan.receiver(stage, tick) == stage) keep(stage, tick, std::move(*made));
    // The passes between stages, in two calls so that each stage receives at most one block per
    // call: those to the next stage round the ring (the last stage's next is stage 0), then those
    // to the previous one. A call no stage sends in is not made (every rank reads the same
    // schedule).
    for (const bool to_next : {true, false}) {
      std::vector<int> to(axis.size, -1);
      bool any = false;
      for (int s = 0; s < axis.size; ++s)
        if (plan.passes(s, tick) && (plan.receiver(s, tick) == (s + 1) % axis.size) == to_next) {
          to[s] = plan.receiver(s, tick);
          any = true;
        }
      if (!any) continue;
      const auto sender = std::find(to.begin(), to.end(), stage);
      const int from = sender == to.end() ? -1 : static_cast<int>(sender - to.begin());
      std::optional<Tn> sent = to[stage] >= 0 ? std::move(made) : std::nullopt;
      if (passes == pipeline_passes::in_background) {
        started.push_back(
            {from, tick, in_background(ctx, [&like, to, sent = std::move(sent)]() mutable {
               return detail::pass_along<P>(like, std::move(sent), to);
             })});
      } else if (std::optional<Tn> got = detail::pass_along<P>(like, std::move(sent), to)) {
        keep(from, tick, std::move(*got));
      }
    }
  }
  while (!started.empty()) take_oldest();
}
template <MeshAxis P, Dim S, AnyTensor Tn, class Forward, class Backward, class... Weight>
requires(!std::is_same_v<std::remove_cvref_t<Forward>, pipeline_passes>) void run_pipeline(
    const Tn& like, const pipeline_schedule& plan, Forward&& forward, Backward&& backward,
    Weight&&... weight) {
  run_pipeline<P, S>(like, plan, pipeline_passes::in_step, std::forward<Forward>(forward),
                     std::forward<Backward>(backward), std::forward<Weight>(weight)...);
}
// run_pipeline<P, S> with S named as the template TPX_DIMS declares.
template <MeshAxis P, template <class...> class S, class... Arguments>
void run_pipeline(Arguments&&... arguments) {
  run_pipeline<P, S<>>(std::forward<Arguments>(arguments)...);
}

}  // namespace tpx::nn

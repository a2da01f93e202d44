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
// The caller gives its stage's two functions, on tensors of the type of `like` ([S_P, ...]):
//   forward(m, in)    the stage's output for microbatch m from `in`, the previous stage's
//                     output; stage 0 gets zeros (it reads microbatch m itself), and the last
//                     stage's output goes nowhere (it computes the loss; return anything)
//   backward(m, dout) the gradient of the stage's input from the gradient of its output; the
//                     last stage gets zeros (it starts from its loss), stage 0's result goes
//                     nowhere; the stage adds its weights' gradients wherever it keeps them
// and run_pipeline runs them in the order of a pipeline_schedule, one step per stage per tick
// (a forward, a backward, or nothing: the bubble), after which the outputs of the tick's
// forwards move one stage on and the input gradients of its backwards one stage back: per
// direction one all_to_all over P in which only the stages that send have a count (NCCL: a
// grouped send and receive between neighbours; a direction no stage sends in at that tick makes
// no call), so the last stage's outputs and stage 0's input gradients stay where they are and an
// idle stage sends nothing. A stage keeps what it receives until its step for that microbatch
// comes. Two orders:
//
//   gpipe        (Huang et al. 2019) every microbatch forward, then every one backward: stage s
//                runs forward m at tick s + m and backward m at tick M + P - 1 + (P - 1 - s) + m;
//                it holds every microbatch's activations (M) until the backward pass
//   one_f_one_b  (PipeDream-Flush, Narayanan et al. 2021; Megatron-LM's default) stage s runs
//                P - 1 - s forwards, then alternates one forward and one backward, then the
//                last backwards: at most P - s microbatches' activations at a time
//
// Both take 2 (M + P - 1) ticks, each stage idle 2 (P - 1) of them: the bubble,
// (P - 1) / (M + P - 1) of the step (seed 001, "Reducing the pipeline overheads"). gpipe passes
// once per tick, one_f_one_b twice in its steady part (both directions are in flight); either
// moves each microbatch's activation and its gradient once across each of the P - 1 stage
// boundaries.
#pragma once

#include <algorithm>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpx/ops/collectives.hpp"

namespace tpx::nn {

enum class pipeline_order { gpipe, one_f_one_b };

// What one stage does at one tick.
struct pipeline_step {
  enum kind { idle, forward, backward } what = idle;
  int microbatch = -1;

  friend bool operator==(const pipeline_step&, const pipeline_step&) = default;
};

// Which step each stage takes at each tick: every stage runs forward m, then backward m, for
// each microbatch m, a forward only after the previous stage's (at an earlier tick), a backward
// only after the next stage's.
class pipeline_schedule {
 public:
  pipeline_schedule(int stages, int microbatches, pipeline_order order = pipeline_order::gpipe)
      : stages_(stages), microbatches_(microbatches) {
    if (stages < 1 || microbatches < 1)
      throw std::invalid_argument("tpx: pipeline of " + std::to_string(stages) + " stages and " +
                                  std::to_string(microbatches) +
                                  " microbatches: it takes at least one of each");
    steps_ = ticks_of(order == pipeline_order::gpipe ? gpipe_sequences() : one_f_one_b_sequences());
  }

  int stages() const { return stages_; }
  int microbatches() const { return microbatches_; }
  int ticks() const { return static_cast<int>(steps_.front().size()); }
  const pipeline_step& at(int stage, int tick) const { return steps_[stage][tick]; }
  // The share of a stage's ticks it idles (every stage alike).
  double bubble() const { return static_cast<double>(ticks() - 2 * microbatches_) / ticks(); }
  // The most microbatches stage `stage` has run forward and not yet backward at once: whose
  // activations it keeps.
  int most_in_flight(int stage) const {
    int now = 0, most = 0;
    for (const pipeline_step& step : steps_[stage]) {
      now += step.what == pipeline_step::forward    ? 1
             : step.what == pipeline_step::backward ? -1
                                                    : 0;
      most = std::max(most, now);
    }
    return most;
  }

 private:
  using sequence = std::vector<pipeline_step>;  // one stage's steps in order, no idle ones

  std::vector<sequence> gpipe_sequences() const {
    std::vector<sequence> order(stages_);
    for (sequence& steps : order) {
      for (int m = 0; m < microbatches_; ++m) steps.push_back({pipeline_step::forward, m});
      for (int m = 0; m < microbatches_; ++m) steps.push_back({pipeline_step::backward, m});
    }
    return order;
  }
  std::vector<sequence> one_f_one_b_sequences() const {
    std::vector<sequence> order(stages_);
    for (int s = 0; s < stages_; ++s) {
      const int warm_up = std::min(stages_ - 1 - s, microbatches_);
      sequence& steps = order[s];
      for (int m = 0; m < warm_up; ++m) steps.push_back({pipeline_step::forward, m});
      for (int m = warm_up; m < microbatches_; ++m) {
        steps.push_back({pipeline_step::forward, m});
        steps.push_back({pipeline_step::backward, m - warm_up});
      }
      for (int m = microbatches_ - warm_up; m < microbatches_; ++m)
        steps.push_back({pipeline_step::backward, m});
    }
    return order;
  }

  // Places each stage's steps on ticks: a step runs at the first tick after its input was made
  // (the previous stage's forward, the next stage's backward) and after the stage's own previous
  // step.
  std::vector<std::vector<pipeline_step>> ticks_of(const std::vector<sequence>& order) const {
    const auto none = std::vector<int>(microbatches_, -1);
    std::vector<std::vector<int>> forward_tick(stages_, none), backward_tick(stages_, none);
    std::vector<std::size_t> next(stages_, 0);
    std::vector<std::vector<pipeline_step>> steps(stages_);
    for (int tick = 0;; ++tick) {
      bool left = false;
      for (int s = 0; s < stages_; ++s) {
        pipeline_step step;
        if (next[s] < order[s].size()) {
          left = true;
          const pipeline_step& want = order[s][next[s]];
          const int m = want.microbatch;
          const bool ready =
              want.what == pipeline_step::forward
                  ? s == 0 || (forward_tick[s - 1][m] >= 0 && forward_tick[s - 1][m] < tick)
                  : s == stages_ - 1 ||
                        (backward_tick[s + 1][m] >= 0 && backward_tick[s + 1][m] < tick);
          if (ready) {
            step = want;
            (want.what == pipeline_step::forward ? forward_tick : backward_tick)[s][m] = tick;
            ++next[s];
          }
        }
        steps[s].push_back(step);
      }
      if (!left) break;
    }
    for (auto& stage_steps : steps) stage_steps.pop_back();  // the tick that found nothing left
    return steps;
  }

  int stages_, microbatches_;
  std::vector<std::vector<pipeline_step>> steps_;  // [stage][tick]
};

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

// One tick's passing in one direction (+1: on to the next stage, -1: back to the previous one):
// `sends[s]` says whether stage s sends (never past the first or last stage); this stage sends
// `sent` if it does (else `sent` stays here), and gets back what its neighbour on the other side
// sent, if it did. One
// all_to_all over P whose only nonzero counts are the senders' (NCCL: a grouped send and
// receive between neighbours), so nothing else moves: no block wraps around, no idle stage
// sends.
template <MeshAxis P, AnyTensor Tn>
std::optional<Tn> pass_along(const Tn& like, std::optional<Tn> sent, const std::vector<bool>& sends,
                             int direction) {
  const rank_context& ctx = like.context();
  any_communicator& comm = ctx.template group<P>();
  const int n = comm.size(), me = comm.rank(), from = me - direction;
  const auto block = static_cast<std::size_t>(like.size());
  std::vector<std::size_t> counts(static_cast<std::size_t>(n) * n, 0);
  for (int s = 0; s < n; ++s)
    if (sends[s]) counts[s * n + s + direction] = block;
  std::optional<Tn> received;
  if (from >= 0 && from < n && sends[from]) received.emplace(ctx, like.shape(), for_overwrite);
  using V = typename Tn::value_type;
  comm.all_to_all(sends[me] ? std::as_const(*sent).elements() : std::span<const V>(),
                  received ? received->elements() : std::span<V>(), counts);
  return received;
}

}  // namespace detail

template <MeshAxis P, Dim S, AnyTensor Tn, class Forward, class Backward>
void run_pipeline(const Tn& like, const pipeline_schedule& plan, Forward&& forward,
                  Backward&& backward) {
  static_assert(detail::check_stage_dim<P, S, Tn>());
  static_assert(std::is_same_v<std::invoke_result_t<Forward&, int, Tn>, Tn> &&
                    std::is_same_v<std::invoke_result_t<Backward&, int, Tn>, Tn>,
                "tpx: pipeline: forward(m, in) and backward(m, dout) take and return tensors of "
                "the type of `like`");
  const rank_context& ctx = like.context();
  const auto& axis = ctx.template axis<P>();
  const std::string who =
      std::string("tpx: pipeline<") + P::name.c_str() + ", " + S::name.c_str() + ">: ";
  if (plan.stages() != axis.size)
    throw std::invalid_argument(who + "a schedule of " + std::to_string(plan.stages()) +
                                " stages on mesh axis " + P::name.c_str() + " of " +
                                std::to_string(axis.size) + " ranks");
  constexpr int k = tpx::detail::checked_dim_position<Tn, S>();
  if (like.global_extent(k) != axis.size)
    throw std::invalid_argument(
        who + "stage dim " + S::name.c_str() + " of " + Tn::notation.c_str() + " has extent " +
        std::to_string(like.global_extent(k)) + " but mesh axis " + P::name.c_str() + " has " +
        std::to_string(axis.size) + " stages: give it one element per stage");
  const int stage = axis.coord, last = axis.size - 1;
  const auto zeros = [&] { return Tn(ctx, like.shape()); };
  // What this stage received and has not used yet: activations from stage - 1, gradients from
  // stage + 1, by microbatch.
  std::vector<std::optional<Tn>> inputs(plan.microbatches()), gradients(plan.microbatches());
  const auto taken = [](std::optional<Tn>& slot) {
    Tn t = std::move(*slot);
    slot.reset();
    return t;
  };
  for (int tick = 0; tick < plan.ticks(); ++tick) {
    const pipeline_step& step = plan.at(stage, tick);
    std::optional<Tn> onward, back;  // this tick's results for stage + 1 and stage - 1
    if (step.what == pipeline_step::forward)
      onward = forward(step.microbatch, stage == 0 ? zeros() : taken(inputs[step.microbatch]));
    else if (step.what == pipeline_step::backward)
      back = backward(step.microbatch, stage == last ? zeros() : taken(gradients[step.microbatch]));
    // Each direction moves when some stage sends in it (every rank reads the same schedule).
    std::vector<bool> sends_on(axis.size, false), sends_back(axis.size, false);
    for (int s = 0; s <= last; ++s) {
      sends_on[s] = s < last && plan.at(s, tick).what == pipeline_step::forward;
      sends_back[s] = s > 0 && plan.at(s, tick).what == pipeline_step::backward;
    }
    if (std::find(sends_on.begin(), sends_on.end(), true) != sends_on.end())
      if (std::optional<Tn> got = detail::pass_along<P>(like, std::move(onward), sends_on, 1))
        inputs[plan.at(stage - 1, tick).microbatch] = std::move(got);
    if (std::find(sends_back.begin(), sends_back.end(), true) != sends_back.end())
      if (std::optional<Tn> got = detail::pass_along<P>(like, std::move(back), sends_back, -1))
        gradients[plan.at(stage + 1, tick).microbatch] = std::move(got);
  }
}
template <MeshAxis P, template <class...> class S, AnyTensor Tn, class Forward, class Backward>
void run_pipeline(const Tn& like, const pipeline_schedule& plan, Forward&& forward,
                  Backward&& backward) {
  run_pipeline<P, S<>>(like, plan, std::forward<Forward>(forward),
                       std::forward<Backward>(backward));
}

}  // namespace tpx::nn

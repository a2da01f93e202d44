// The schedules of pipeline parallelism: which microbatch's forward or backward pass each stage
// runs at each tick of a step (nn/pipeline.hpp runs them). Every stage runs forward m, then
// backward m, for each microbatch m; a forward only after the previous stage's at an earlier
// tick, a backward only after the next stage's. The orders:
//
//   gpipe        (Huang et al. 2019) every microbatch forward, then every one backward: stage s
//                runs forward m at tick s + m and backward m at tick M + P - 1 + (P - 1 - s) + m,
//                and holds every microbatch's activations (M) until the backward pass
//   one_f_one_b  (PipeDream-Flush, Narayanan et al. 2021; Megatron-LM's default) stage s runs
//                P - 1 - s forwards, then alternates one forward and one backward, then the last
//                backwards: at most P - s microbatches' activations at a time
//   zero_bubble  (after Qi et al. 2024, "Zero Bubble Pipeline Parallelism"; seed 001's DeepSeek
//                schedule) each backward split in two: the input gradient (backward), which the
//                previous stage waits for, and the weight gradient (weight), which nobody waits
//                for and so fills ticks the other two would leave idle
//
// At each tick each stage takes, of its steps whose inputs exist, the first by its order's
// preference: GPipe prefers a forward; 1F1B a backward, and runs a forward only while fewer than
// P - s microbatches are in flight (run forward, not yet backward); zero-bubble a backward, then
// a forward (while fewer than P - s + extra_in_flight are in flight, a microbatch now in flight
// until its weight step, which reads its activations), then a weight step. Microbatches go
// through each kind of step in order. GPipe and 1F1B take 2 (M + P - 1) ticks, each stage idle
// 2 (P - 1) of them: the bubble, (P - 1) / (M + P - 1) of the step (seed 001, "Reducing the
// pipeline overheads"), where a backward tick does twice a forward's work. Zero-bubble's three
// kinds of tick each do about a forward's work (one product per layer: x W, dy W^T, x^T dy), and
// it takes 3 M + 2 (P - 1) - min(extra_in_flight, P - 1, M - 1) ticks: with 1F1B's memory (extra
// 0) the bubble is two thirds of 1F1B's 3 (P - 1) forward-times; each microbatch more in flight
// takes one tick off, down to P - 1 (pipeline_test checks both for P <= 5, M <= 7). Everything is
// a function of (P, M, order, extra_in_flight), so every rank computes the same schedule without
// communicating.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpx::nn {

enum class pipeline_order { gpipe, one_f_one_b, zero_bubble };

// What one stage does at one tick. Under zero_bubble, backward is the input gradient alone and
// weight the weight gradient; the other orders have no weight steps (backward does both).
struct pipeline_step {
  enum kind { idle, forward, backward, weight } what = idle;
  int microbatch = -1;

  friend bool operator==(const pipeline_step&, const pipeline_step&) = default;
};

// Which step each stage takes at each tick.
class pipeline_schedule {
 public:
  pipeline_schedule(int stages, int microbatches, pipeline_order order = pipeline_order::gpipe,
                    int extra_in_flight = 0)
      : stages_(stages), microbatches_(microbatches), split_(order == pipeline_order::zero_bubble) {
    if (stages < 1 || microbatches < 1)
      throw std::invalid_argument("tpx: pipeline of " + std::to_string(stages) + " stages and " +
                                  std::to_string(microbatches) +
                                  " microbatches: it takes at least one of each");
    if (extra_in_flight < 0 || (extra_in_flight > 0 && !split_))
      throw std::invalid_argument(
          "tpx: pipeline schedule with " + std::to_string(extra_in_flight) +
          " extra microbatches in flight: only the zero-bubble order takes extra ones (0 or more)");
    place(order, extra_in_flight);
  }

  int stages() const { return stages_; }
  int microbatches() const { return microbatches_; }
  int ticks() const { return static_cast<int>(steps_.front().size()); }
  const pipeline_step& at(int stage, int tick) const { return steps_[stage][tick]; }
  // Whether the backward pass is split into input-gradient and weight steps (zero_bubble).
  bool splits_backward() const { return split_; }
  // The share of a stage's ticks it idles (every stage alike).
  double bubble() const { return static_cast<double>(ticks() - steps_per_stage()) / ticks(); }
  // The most microbatches stage `stage` has run forward and not yet finished backward (under
  // zero_bubble: its weight step) at once: whose activations it keeps.
  int most_in_flight(int stage) const {
    int now = 0, most = 0;
    for (const pipeline_step& step : steps_[stage]) {
      now += step.what == pipeline_step::forward ? 1 : step.what == finishing() ? -1 : 0;
      most = std::max(most, now);
    }
    return most;
  }

 private:
  int steps_per_stage() const { return (split_ ? 3 : 2) * microbatches_; }
  pipeline_step::kind finishing() const {
    return split_ ? pipeline_step::weight : pipeline_step::backward;
  }

  // Places every stage's steps tick by tick, each stage taking its first ready step in the
  // order's preference (the header's rules).
  void place(pipeline_order order, int extra_in_flight) {
    using kind = pipeline_step::kind;
    const auto preference = order == pipeline_order::gpipe
                                ? std::vector<kind>{pipeline_step::forward, pipeline_step::backward}
                            : order == pipeline_order::one_f_one_b
                                ? std::vector<kind>{pipeline_step::backward, pipeline_step::forward}
                                : std::vector<kind>{pipeline_step::backward, pipeline_step::forward,
                                                    pipeline_step::weight};
    const auto in_flight_bound = [&](int s) {
      return order == pipeline_order::gpipe ? microbatches_ : stages_ - s + extra_in_flight;
    };
    // done[kind][s][m]: the tick stage s ran that step of microbatch m; next[s][kind]: its next
    // microbatch of that kind.
    constexpr int never = std::numeric_limits<int>::max();
    std::array<std::vector<std::vector<int>>, 4> done;
    for (auto& of_kind : done) of_kind.assign(stages_, std::vector<int>(microbatches_, never));
    std::vector<std::array<int, 4>> next(stages_, std::array<int, 4>{});
    steps_.assign(stages_, {});
    const auto before = [&](kind k, int s, int m, int tick) { return done[k][s][m] < tick; };
    const auto ready = [&](int s, kind k, int tick) {
      const int m = next[s][k];
      if (m >= microbatches_) return false;
      switch (k) {
        case pipeline_step::forward:
          return (s == 0 || before(k, s - 1, m, tick)) &&
                 m - next[s][finishing()] < in_flight_bound(s);
        case pipeline_step::backward:
          return before(pipeline_step::forward, s, m, tick) &&
                 (s == stages_ - 1 || before(k, s + 1, m, tick));
        default:
          return before(pipeline_step::backward, s, m, tick);
      }
    };
    const auto finished = [&] {
      for (int s = 0; s < stages_; ++s)
        if (next[s][finishing()] < microbatches_) return false;
      return true;
    };
    // A step's inputs are made at earlier ticks, so each stage may take its step at once.
    for (int tick = 0; !finished(); ++tick)
      for (int s = 0; s < stages_; ++s) {
        pipeline_step step;
        for (const kind k : preference)
          if (ready(s, k, tick)) {
            step = {k, next[s][k]++};
            done[k][s][step.microbatch] = tick;
            break;
          }
        steps_[s].push_back(step);
      }
  }

  int stages_, microbatches_;
  bool split_;
  std::vector<std::vector<pipeline_step>> steps_;  // [stage][tick]
};

}  // namespace tpx::nn

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
//
// A schedule places each stage's steps, in its order, on the first tick at which their inputs
// exist. Both orders take 2 (M + P - 1) ticks, each stage idle 2 (P - 1) of them: the bubble,
// (P - 1) / (M + P - 1) of the step (seed 001, "Reducing the pipeline overheads"). Everything is a
// function of (P, M, order), so every rank computes the same schedule without communicating.
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpx::nn {

enum class pipeline_order { gpipe, one_f_one_b };

// What one stage does at one tick.
struct pipeline_step {
  enum kind { idle, forward, backward } what = idle;
  int microbatch = -1;

  friend bool operator==(const pipeline_step&, const pipeline_step&) = default;
};

// Which step each stage takes at each tick.
class pipeline_schedule {
 public:
  pipeline_schedule(int stages, int microbatches, pipeline_order order = pipeline_order::gpipe)
      : stages_(stages), microbatches_(microbatches) {
    if (stages < 1 || microbatches < 1)
      throw std::invalid_argument("tpx: pipeline of " + std::to_string(stages) + " stages and " +
                                  std::to_string(microbatches) +
                                  " microbatches: it takes at least one of each");
    steps_ = ticks_of(sequences(order));
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

  // Each stage's steps: `warm_up` forwards, then one forward and one backward at a time, then
  // the backwards left. GPipe's warm-up is every microbatch (all forwards, then all backwards),
  // 1F1B's the P - 1 - s forwards that fill the stages after s.
  std::vector<sequence> sequences(pipeline_order order) const {
    std::vector<sequence> sequence_of(stages_);
    for (int s = 0; s < stages_; ++s) {
      const int warm_up =
          order == pipeline_order::gpipe ? microbatches_ : std::min(stages_ - 1 - s, microbatches_);
      sequence& steps = sequence_of[s];
      for (int m = 0; m < warm_up; ++m) steps.push_back({pipeline_step::forward, m});
      for (int m = warm_up; m < microbatches_; ++m) {
        steps.push_back({pipeline_step::forward, m});
        steps.push_back({pipeline_step::backward, m - warm_up});
      }
      for (int m = microbatches_ - warm_up; m < microbatches_; ++m)
        steps.push_back({pipeline_step::backward, m});
    }
    return sequence_of;
  }

  // Places each stage's steps on ticks: a step runs at the first tick after its input was made
  // (the previous stage's forward, the next stage's backward) and after the stage's own previous
  // step.
  std::vector<std::vector<pipeline_step>> ticks_of(const std::vector<sequence>& order) const {
    const auto none = std::vector<int>(microbatches_, -1);
    std::vector<std::vector<int>> forward_tick(stages_, none), backward_tick(stages_, none);
    std::vector<std::size_t> next(stages_, 0);
    std::vector<std::vector<pipeline_step>> steps(stages_);
    const auto steps_left = [&] {
      for (int s = 0; s < stages_; ++s)
        if (next[s] < order[s].size()) return true;
      return false;
    };
    for (int tick = 0; steps_left(); ++tick) {
      for (int s = 0; s < stages_; ++s) {
        pipeline_step step;
        if (next[s] < order[s].size()) {
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
    }
    return steps;
  }

  int stages_, microbatches_;
  std::vector<std::vector<pipeline_step>> steps_;  // [stage][tick]
};

}  // namespace tpx::nn

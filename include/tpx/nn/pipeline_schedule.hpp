// The schedules of pipeline parallelism: which microbatch's forward or backward pass each stage
// runs at each tick of a step (nn/pipeline.hpp runs them). Every stage runs forward m, then
// backward m, for each microbatch m; a forward only after the previous stage's at an earlier
// tick, a backward only after the next stage's (with several chunks per stage: the previous and
// the next piece of the model's). The orders:
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
//   interleaved  (Megatron-LM's interleaved 1F1B, Narayanan et al. 2021) each stage holds
//                `chunks` = v chunks of layers, the model cut into vP pieces dealt round the
//                stages (chunk c of stage s is piece c P + s), so a microbatch passes the stages
//                v times; the steps carry the chunk, and stage s runs Megatron's order: forwards
//                through the chunks P microbatches at a time, 2 (P - 1 - s) + (v - 1) P of them
//                first, then one forward and one backward (chunks last to first) at a time
//   zero_bubble_v  (the V schedule of Qi et al. 2024, "Pipeline Parallelism with Controllable
//                Memory"; PyTorch's ScheduleZBVZeroBubble) zero-bubble's split backward over two
//                chunks per stage placed in a V: chunk 0 of stage s is piece s, chunk 1 piece
//                2P - 1 - s, so a microbatch goes down the stages and back up, the last stage
//                turns it round without a pass, and stage 0 holds both the first piece and the
//                last (the embedding and the loss)
//
// GPipe, 1F1B and both zero-bubble orders place each step by preference: at each tick each stage
// takes, of its steps whose inputs exist, the first by its order's preference: GPipe prefers a
// forward; 1F1B a backward, and runs a forward only while fewer than P - s microbatches are in
// flight (run forward, not yet backward); zero-bubble a backward, then a forward (while fewer
// than P - s + extra_in_flight are in flight, a microbatch now in flight until its weight step,
// which reads its activations), then a weight step. Microbatches go through each kind of step in
// order. zero_bubble_v prefers the same kinds, counts in flight the (microbatch, chunk) pairs, at
// most 2 P + extra_in_flight of them, and between its two chunks takes the forward of the later
// piece of the model and the backward of the earlier one (which keep the V's both arms moving),
// and the weight step of the earlier microbatch. The interleaved order places its fixed sequence
// of steps, each at the first tick its input exists.
//
// GPipe and 1F1B take 2 (M + P - 1) ticks, each stage idle 2 (P - 1) of them: the bubble,
// (P - 1) / (M + P - 1) of the step (seed 001, "Reducing the pipeline overheads"), where a
// backward tick does twice a forward's work. Zero-bubble's three kinds of tick each do about a
// forward's work (one product per layer: x W, dy W^T, x^T dy), and it takes 3 M + 2 (P - 1) -
// min(extra_in_flight, P - 1, M - 1) ticks: with 1F1B's memory (extra 0) the bubble is two thirds
// of 1F1B's 3 (P - 1) forward-times; each microbatch more in flight takes one tick off, down to
// P - 1. Interleaved ticks each run one chunk (1/v of a stage's layers), and it takes
// 2 (v M + P - 1) of them: the bubble is (P - 1) / (v M + P - 1), v times smaller for many
// microbatches, for v times the passes between stages and, on stage s, up to
// 2 (P - 1 - s) + (v - 1) P + 1 chunks' activations in flight (each chunk 1/v of the stage's
// layers: more than 1F1B's P - s microbatches' worth). It needs M to be a multiple of P.
// zero_bubble_v's ticks also run one chunk (half a stage's layers) each, 6 M of them per stage:
// it takes at least 6 M + P - 1 (the last stage starts P - 1 ticks late), and its placement
// reaches that for P <= 4 when M >= P, a tick or two more beyond: a bubble of (P - 1) / 2
// forward-times of a stage, a quarter of zero-bubble's with 1F1B's memory, with 2 P chunks in
// flight on every stage (1F1B's stage 0 holds P microbatches of its whole layers: the same).
// (pipeline_test checks each order's count for P <= 5.) Everything is a function of (P, M,
// order, options), so every rank computes the same schedule without communicating.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpx::nn {

enum class pipeline_order { gpipe, one_f_one_b, zero_bubble, interleaved, zero_bubble_v };

// "gpipe", "1f1b", "zero-bubble", "interleaved", "zero-bubble V": the orders' names in messages.
constexpr const char* order_name(pipeline_order order) {
  switch (order) {
    case pipeline_order::gpipe:
      return "gpipe";
    case pipeline_order::one_f_one_b:
      return "1f1b";
    case pipeline_order::zero_bubble:
      return "zero-bubble";
    case pipeline_order::interleaved:
      return "interleaved";
    default:
      return "zero-bubble V";
  }
}

// The orders' settings beyond P and M: pipeline_schedule(P, M, order, {.chunks = 2}).
struct pipeline_options {
  int chunks = 1;           // interleaved: chunks of layers per stage (2 or more)
  int extra_in_flight = 0;  // zero_bubble: microbatches in flight beyond 1F1B's P - s;
                            // zero_bubble_v: (microbatch, chunk) pairs beyond 2 P
};

// Where a piece of the model runs: chunk `chunk` of stage `stage`.
struct pipeline_piece {
  int stage = 0;
  int chunk = 0;
};

// Where the model's pieces run: `chunks` pieces per stage, in the places an order gives them
// (chunk c of stage s is piece c P + s; in zero_bubble_v's V, s for chunk 0 and 2 P - 1 - s for
// chunk 1). What a model's tensors need of a schedule, without its ticks
// (pipeline_schedule::placement()).
class pipeline_placement {
 public:
  pipeline_placement(int stages, int chunks, pipeline_order order)
      : stages_(stages), chunks_(chunks), v_(order == pipeline_order::zero_bubble_v) {}

  int stages() const { return stages_; }
  int chunks() const { return chunks_; }
  // The model's pieces in order, chunks() per stage: piece(stage, chunk) is the place of a
  // stage's chunk in the model, holder(piece) the stage and chunk that run a piece.
  int pieces() const { return chunks_ * stages_; }
  int piece(int stage, int chunk) const {
    if (v_) return chunk == 0 ? stage : 2 * stages_ - 1 - stage;
    return chunk * stages_ + stage;
  }
  pipeline_piece holder(int piece) const {
    if (v_)
      return piece < stages_ ? pipeline_piece{piece, 0}
                             : pipeline_piece{2 * stages_ - 1 - piece, 1};
    return {piece % stages_, piece / stages_};
  }

 private:
  int stages_, chunks_;
  bool v_;  // zero_bubble_v's V
};

// What one stage does at one tick. Under the zero-bubble orders, backward is the input gradient
// alone and weight the weight gradient; the other orders have no weight steps (backward does
// both). The chunk is the stage's chunk of layers the step runs (0 but under interleaved and
// zero_bubble_v).
struct pipeline_step {
  enum kind { idle, forward, backward, weight } what = idle;
  int microbatch = -1;
  int chunk = 0;

  friend bool operator==(const pipeline_step&, const pipeline_step&) = default;
};

// Which step each stage takes at each tick.
class pipeline_schedule {
 public:
  pipeline_schedule(int stages, int microbatches, pipeline_order order = pipeline_order::gpipe,
                    pipeline_options options = {})
      : stages_(stages),
        microbatches_(microbatches),
        chunks_(order == pipeline_order::zero_bubble_v ? 2 : options.chunks),
        order_(order),
        placement_(stages, chunks_, order) {
    const auto refuse = [&](const std::string& why) {
      throw std::invalid_argument("tpx: pipeline schedule of " + std::to_string(stages) +
                                  " stages and " + std::to_string(microbatches) +
                                  " microbatches: " + why);
    };
    if (stages < 1 || microbatches < 1) refuse("it takes at least one of each");
    if (options.extra_in_flight < 0 || (options.extra_in_flight > 0 && !splits_backward()))
      refuse(std::to_string(options.extra_in_flight) +
             " extra microbatches in flight: only the zero-bubble orders take extra ones (0 or "
             "more)");
    if (order == pipeline_order::interleaved) {
      if (chunks_ < 2)
        refuse("interleaved with " + std::to_string(chunks_) +
               " chunks per stage: give 2 or more (with 1, one_f_one_b)");
      if (microbatches % stages != 0)
        refuse("interleaved needs the microbatches to be a multiple of the stages");
      place_interleaved();
    } else {
      if (options.chunks != 1)
        refuse(std::to_string(options.chunks) +
               " chunks per stage: only the interleaved order takes more than one" +
               (order == pipeline_order::zero_bubble_v ? " (zero-bubble V always runs two)" : ""));
      place_by_preference(options.extra_in_flight);
    }
    done_ = {};  // needed only while placing
  }

  int stages() const { return stages_; }
  int microbatches() const { return microbatches_; }
  int chunks() const { return chunks_; }
  pipeline_order order() const { return order_; }
  int ticks() const { return static_cast<int>(steps_.front().size()); }
  const pipeline_step& at(int stage, int tick) const { return steps_[stage][tick]; }
  // Where the model's pieces run (pipeline_placement), and its pieces(), piece(stage, chunk)
  // and holder(piece).
  const pipeline_placement& placement() const { return placement_; }
  int pieces() const { return placement_.pieces(); }
  int piece(int stage, int chunk) const { return placement_.piece(stage, chunk); }
  pipeline_piece holder(int piece) const { return placement_.holder(piece); }
  // Where the block that stage `stage`'s step at `tick` makes goes: the piece after it for a
  // forward's output, the piece before it for a backward's input gradient; nowhere (-1) for the
  // last piece's forward, the first piece's backward, a weight step or idling.
  int receiver(int stage, int tick) const {
    const pipeline_step& step = at(stage, tick);
    const int p = piece(stage, step.chunk);
    if (step.what == pipeline_step::forward && p < pieces() - 1) return holder(p + 1).stage;
    if (step.what == pipeline_step::backward && p > 0) return holder(p - 1).stage;
    return -1;
  }
  // Whether that block goes to another stage (a pass over P), not to a chunk of the same one.
  bool passes(int stage, int tick) const {
    const int to = receiver(stage, tick);
    return to >= 0 && to != stage;
  }
  // Whether the backward pass is split into input-gradient and weight steps (the zero-bubble
  // orders).
  bool splits_backward() const {
    return order_ == pipeline_order::zero_bubble || order_ == pipeline_order::zero_bubble_v;
  }
  // The share of a stage's ticks it idles (every stage alike).
  double bubble() const { return static_cast<double>(ticks() - steps_per_stage()) / ticks(); }
  // The schedule as the papers draw it, a line per stage and a column per tick: F, B or W and
  // the microbatch (and "/c", the chunk, with more than one per stage), "." where the stage
  // idles:
  //   stage 0: F0 F1 .  .  B0 B1
  //   stage 1: .  F0 F1 B0 B1 .     (GPipe, P = 2, M = 2)
  std::string diagram() const {
    const auto text = [&](const pipeline_step& step) {
      if (step.what == pipeline_step::idle) return std::string(".");
      std::string t(1, "FBW"[step.what - pipeline_step::forward]);
      t += std::to_string(step.microbatch);
      if (chunks_ > 1) t += "/" + std::to_string(step.chunk);
      return t;
    };
    std::size_t width = 1;
    for (const auto& row : steps_)
      for (const pipeline_step& step : row) width = std::max(width, text(step).size());
    std::string out;
    for (int s = 0; s < stages_; ++s) {
      const std::string label = std::to_string(s);
      std::string line = "stage " + label + ":" +
                         std::string(std::to_string(stages_ - 1).size() - label.size(), ' ');
      for (const pipeline_step& step : steps_[s]) {
        const std::string t = text(step);
        line += " " + t + std::string(width - t.size(), ' ');
      }
      line.erase(line.find_last_not_of(' ') + 1);
      out += line + "\n";
    }
    return out;
  }
  // The most (microbatch, chunk) pairs stage `stage` has run forward and not yet finished
  // backward (under the zero-bubble orders: its weight step) at once: whose activations it
  // keeps.
  int most_in_flight(int stage) const {
    int now = 0, most = 0;
    for (const pipeline_step& step : steps_[stage]) {
      now += step.what == pipeline_step::forward ? 1 : step.what == finishing() ? -1 : 0;
      most = std::max(most, now);
    }
    return most;
  }

 private:
  using kind = pipeline_step::kind;

  int steps_per_stage() const { return (splits_backward() ? 3 : 2) * microbatches_ * chunks_; }
  kind finishing() const {
    return splits_backward() ? pipeline_step::weight : pipeline_step::backward;
  }

  // While placing, done_[kind][piece][m]: the tick at which the step of that kind ran
  // microbatch m through that piece of the model.
  static constexpr int never = std::numeric_limits<int>::max();
  std::array<std::vector<std::vector<int>>, 4> done_;

  // Whether stage s may take `step` at `tick`: its input was made at an earlier tick (the
  // previous piece's forward, the next piece's backward, the same piece's backward for a weight
  // step).
  bool ready(int s, const pipeline_step& step, int tick) const {
    const int p = piece(s, step.chunk), m = step.microbatch;
    const auto before = [&](kind k, int of) { return done_[k][of][m] < tick; };
    switch (step.what) {
      case pipeline_step::forward:
        return p == 0 || before(pipeline_step::forward, p - 1);
      case pipeline_step::backward:
        return before(pipeline_step::forward, p) &&
               (p == pieces() - 1 || before(pipeline_step::backward, p + 1));
      default:
        return before(pipeline_step::backward, p);
    }
  }

  // Places the steps tick by tick: choose(s, tick) gives stage s's step (idle if none is ready),
  // recorded as done at once (a step's inputs are made at earlier ticks, so the stages' choices
  // at one tick do not depend on each other), until finished(). A tick at which no stage can
  // move would repeat forever: an order that deadlocks, refused rather than looped on.
  template <class Choose, class Finished>
  void place(const Choose& choose, const Finished& finished) {
    for (auto& of_kind : done_) of_kind.assign(pieces(), std::vector<int>(microbatches_, never));
    steps_.assign(stages_, {});
    for (int tick = 0; !finished(); ++tick) {
      bool moved = false;
      for (int s = 0; s < stages_; ++s) {
        const pipeline_step step = choose(s, tick);
        if (step.what != pipeline_step::idle) {
          done_[step.what][piece(s, step.chunk)][step.microbatch] = tick;
          moved = true;
        }
        steps_[s].push_back(step);
      }
      if (!moved)
        throw std::logic_error("tpx: pipeline schedule: no stage can take a step at tick " +
                               std::to_string(tick) + " (an order that deadlocks)");
    }
  }

  // Places every stage's steps tick by tick, each stage taking its first ready step in the
  // order's preference (the header's rules).
  void place_by_preference(int extra_in_flight) {
    const auto preference = order_ == pipeline_order::gpipe
                                ? std::vector<kind>{pipeline_step::forward, pipeline_step::backward}
                            : order_ == pipeline_order::one_f_one_b
                                ? std::vector<kind>{pipeline_step::backward, pipeline_step::forward}
                                : std::vector<kind>{pipeline_step::backward, pipeline_step::forward,
                                                    pipeline_step::weight};
    const auto in_flight_bound = [&](int s) {
      return order_ == pipeline_order::gpipe           ? microbatches_
             : order_ == pipeline_order::zero_bubble_v ? 2 * stages_ + extra_in_flight
                                                       : stages_ - s + extra_in_flight;
    };
    // next[s][chunk][kind]: the microbatch stage s runs next through that chunk in that kind of
    // step; in_flight(s): its (microbatch, chunk) pairs run forward and not yet finished.
    std::vector<std::vector<std::array<int, 4>>> next(
        stages_, std::vector<std::array<int, 4>>(chunks_, std::array<int, 4>{}));
    const auto in_flight = [&](int s) {
      int n = 0;
      for (const std::array<int, 4>& of_chunk : next[s])
        n += of_chunk[pipeline_step::forward] - of_chunk[finishing()];
      return n;
    };
    // Between two ready steps of one kind: the forward of the later piece, the backward of the
    // earlier one, the weight step of the earlier microbatch.
    const auto better = [&](int s, const pipeline_step& a, const pipeline_step& b) {
      const int pa = piece(s, a.chunk), pb = piece(s, b.chunk);
      if (a.what == pipeline_step::forward) return pa > pb;
      if (a.what == pipeline_step::backward) return pa < pb;
      return a.microbatch != b.microbatch ? a.microbatch < b.microbatch : pa < pb;
    };
    place(
        [&](int s, int tick) {
          for (const kind k : preference) {
            if (k == pipeline_step::forward && in_flight(s) >= in_flight_bound(s)) continue;
            std::optional<pipeline_step> chosen;
            for (int c = 0; c < chunks_; ++c) {
              const pipeline_step want{k, next[s][c][k], c};
              if (want.microbatch < microbatches_ && ready(s, want, tick) &&
                  (!chosen || better(s, want, *chosen)))
                chosen = want;
            }
            if (chosen) {
              ++next[s][chosen->chunk][k];
              return *chosen;
            }
          }
          return pipeline_step{};
        },
        [&] {
          for (int s = 0; s < stages_; ++s)
            for (int c = 0; c < chunks_; ++c)
              if (next[s][c][finishing()] < microbatches_) return false;
          return true;
        });
  }

  // Megatron-LM's interleaved order for each stage, each step placed at the first tick its
  // input exists (and after the stage's previous step).
  void place_interleaved() {
    const int v = chunks_, per_stage = microbatches_ * v;
    // The k-th forward of a stage: chunk (k / P) mod v of microbatch (k / (P v)) P + k mod P;
    // the k-th backward the same microbatch through the chunks from the last.
    const auto forward_at = [&](int k) {
      return pipeline_step{pipeline_step::forward, (k / (stages_ * v)) * stages_ + k % stages_,
                           (k / stages_) % v};
    };
    const auto backward_at = [&](int k) {
      const pipeline_step f = forward_at(k);
      return pipeline_step{pipeline_step::backward, f.microbatch, v - 1 - f.chunk};
    };
    std::vector<std::vector<pipeline_step>> sequence(stages_);
    for (int s = 0; s < stages_; ++s) {
      const int warm_up = std::min(2 * (stages_ - 1 - s) + (v - 1) * stages_, per_stage);
      for (int k = 0; k < warm_up; ++k) sequence[s].push_back(forward_at(k));
      for (int k = warm_up; k < per_stage; ++k) {
        sequence[s].push_back(forward_at(k));
        sequence[s].push_back(backward_at(k - warm_up));
      }
      for (int k = per_stage - warm_up; k < per_stage; ++k) sequence[s].push_back(backward_at(k));
    }
    std::vector<std::size_t> next(stages_, 0);
    place(
        [&](int s, int tick) {
          if (next[s] < sequence[s].size() && ready(s, sequence[s][next[s]], tick))
            return sequence[s][next[s]++];
          return pipeline_step{};
        },
        [&] {
          for (int s = 0; s < stages_; ++s)
            if (next[s] < sequence[s].size()) return false;
          return true;
        });
  }

  int stages_, microbatches_, chunks_;
  pipeline_order order_;
  pipeline_placement placement_;
  std::vector<std::vector<pipeline_step>> steps_;  // [stage][tick]
};

}  // namespace tpx::nn

// Phase timing: where a rank's step time goes, phase by phase, on the host and on a GPU alike.
//
//   tpx::phase_timing timing(rank);          // this rank thread's marks are timed from now on
//   tpx::mark_phase("attention forward");    // ends the open phase, starts this one
//   ...                                      // the work of the phase
//   tpx::mark_phase("");                     // ends it; nothing is timed until the next mark
//   for (const tpx::phase_time& p : timing.totals()) ...   // seconds and marks per name
//
// Marks divide the rank's work into consecutive phases, so the phases of a step add up to the
// step, less the gaps a "" mark leaves (a trainer's report between steps). A phase's time is the
// time the rank's work spent in it where the rank runs it: wall time on the host, whose ranks
// compute as they are called; on a GPU, where the rank's thread only queues work, the time
// between two timing events that the rank's stream reaches (cuda/phase_clock.hpp), which works
// where no profiler can attach. This is what a kernel-by-kernel profile cannot say: whether the
// GPU waits between kernels, and how the step's time splits among the model's own parts.
//
// A clock belongs to the thread that made its phase_timing (a rank's thread): mark_phase on any
// other thread, such as a rank's communication thread, or with no timing made, costs a branch
// and times nothing. Work a rank's background lane runs beside its stream is not timed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tpx/spmd/rank_context.hpp"

namespace tpx {

// One phase's time so far: its name, its seconds, and how many times it was marked.
struct phase_time {
  std::string name;
  double seconds = 0;
  std::int64_t count = 0;
};

// What a backend's clock does with marks; phases are kept by name in the order first marked.
class phase_clock {
 public:
  virtual ~phase_clock() = default;
  // Ends the open phase and starts `name` (none for an empty name).
  virtual void mark(std::string_view name) = 0;

  // Every finished phase's time so far (on a GPU, waits for the marked work).
  std::vector<phase_time> totals() {
    settle();
    return phases_;
  }
  // Forgets the time of the phases finished so far (a warm-up step's). A phase open at the reset
  // keeps its time since its mark, so reset between phases, after a "" mark (as the trainer does).
  void reset() {
    settle();
    for (phase_time& p : phases_) p = {p.name, 0, 0};
  }

 protected:
  // Adds the spans that have finished to the totals (on a GPU, once the work has run).
  virtual void settle() = 0;

  // The index of the phase `name`, made on its first mark.
  int index_of(std::string_view name) {
    for (std::size_t i = 0; i < phases_.size(); ++i)
      if (phases_[i].name == name) return static_cast<int>(i);
    phases_.push_back({std::string(name), 0, 0});
    return static_cast<int>(phases_.size()) - 1;
  }
  void add(int phase, double seconds) {
    phases_[phase].seconds += seconds;
    ++phases_[phase].count;
  }

 private:
  std::vector<phase_time> phases_;
};

// The host's clock: the rank computes as it is called, so a phase lasts from its mark to the next.
class host_phase_clock final : public phase_clock {
 public:
  void mark(std::string_view name) override {
    const auto now = std::chrono::steady_clock::now();
    if (open_ >= 0) add(open_, std::chrono::duration<double>(now - since_).count());
    open_ = name.empty() ? -1 : index_of(name);
    since_ = now;
  }

 private:
  void settle() override {}
  int open_ = -1;
  std::chrono::steady_clock::time_point since_;
};

// A backend whose ranks queue work (CUDA) makes clocks that time it where it runs.
class phase_clock_source {
 public:
  virtual ~phase_clock_source() = default;
  virtual std::unique_ptr<phase_clock> make_phase_clock() = 0;
};

namespace detail {
inline thread_local phase_clock* phase_clock_of_thread = nullptr;
}  // namespace detail

// Ends the calling rank thread's open phase and starts `name` ("" starts none).
inline void mark_phase(std::string_view name) {
  if (detail::phase_clock_of_thread != nullptr) detail::phase_clock_of_thread->mark(name);
}

// Times the calling thread's marks while it lives, with the clock of rank's backend (the host's
// when the backend has none). One per thread at a time.
class phase_timing {
 public:
  explicit phase_timing(const rank_context& rank) {
    if (detail::phase_clock_of_thread != nullptr)
      throw std::logic_error("tpx: phase_timing: rank " + std::to_string(rank.world_rank()) +
                             "'s thread already times its phases");
    if (auto* source = dynamic_cast<phase_clock_source*>(rank.backend()))
      clock_ = source->make_phase_clock();
    else
      clock_ = std::make_unique<host_phase_clock>();
    detail::phase_clock_of_thread = clock_.get();
  }
  phase_timing(const phase_timing&) = delete;
  phase_timing& operator=(const phase_timing&) = delete;
  ~phase_timing() { detail::phase_clock_of_thread = nullptr; }

  std::vector<phase_time> totals() { return clock_->totals(); }
  void reset() { clock_->reset(); }

 private:
  std::unique_ptr<phase_clock> clock_;
};

}  // namespace tpx

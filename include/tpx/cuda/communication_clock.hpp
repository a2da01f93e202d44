// communication_clock: a CUDA rank's communication time, measured on the device.
//
// On the host a collective's wall time is its cost; on a GPU the rank's thread only queues the
// collective, and what it costs is the time the streams spend on it. So the communicators time
// their work with pairs of timing events around it (spans): the collective itself, on whatever
// stream runs it (NCCL's own stream, or the rank's for the simulated mesh), counts towards the
// total; the time the rank's own stream spends waiting for communication counts as exposed: a
// collective the simulated mesh runs on the rank's own stream, the wait of the rank's own stream
// for an NCCL collective, and the wait for a background task's work at its join (pending::get).
// Collectives on the background lane and NCCL collectives started from it count towards the
// total only: the rank's own stream does not wait for them until the join. A wait measures from
// the moment the rank's own stream reaches it to the moment the awaited work is done, which is
// the part of the communication the computation before it did not hide. A join waits for all of
// the task's work, its casts included (the host's communication thread counts them too).
// Groups of one rank are not timed: their collectives are copies.
//
// totals() adds the spans whose events have fired (it never blocks), so figures read after the
// step's loss has been read back (the trainer's reports) are complete. Events are reused. While
// the rank's work is being recorded (a CUDA graph, step_graph.hpp) the clock is paused: events
// recorded then mark the capture's dependencies and never fire, so that work is not timed, in
// the recording or in its replays.
#pragma once

#include <cuda_runtime.h>

#include <optional>
#include <utility>
#include <vector>

#include "tpx/cuda/stream.hpp"
#include "tpx/spmd/rank_context.hpp"

namespace tpx::cuda {

class communication_clock {
 public:
  // What a span counts towards.
  enum counts : unsigned { total = 1, exposed = 2, total_and_exposed = 3 };

  // Times the work `enqueue` queues on `stream`.
  template <class Enqueue>
  void time(cudaStream_t stream, counts what, Enqueue&& enqueue) {
    start(stream);
    std::forward<Enqueue>(enqueue)();
    stop(stream, what);
  }
  // The same in two calls, for work queued between them: a span starts on `stream`, and stop()
  // ends the one started last (a span started and never stopped, by a collective that threw, is
  // dropped by the next start).
  void start(cudaStream_t stream) {
    if (paused_) return;
    open_ = events_.take();
    open_->record(stream);
  }
  void stop(cudaStream_t stream, counts what) {
    if (!open_) return;
    event end = events_.take();
    end.record(stream);
    spans_.push_back({std::move(*open_), std::move(end), what});
    open_.reset();
  }

  // Pauses (true) or resumes (false) the timing of spans.
  void pause(bool paused) {
    paused_ = paused;
    open_.reset();
  }

  // The communication of every span that has finished so far.
  communication_seconds totals() {
    std::vector<span> unfinished;
    for (span& s : spans_) {
      if (!s.stop.done()) {
        unfinished.push_back(std::move(s));
        continue;
      }
      const double elapsed = elapsed_ms(s.start, s.stop) / 1e3;
      if (s.what & total) sum_.total += elapsed;
      if (s.what & exposed) sum_.exposed += elapsed;
      events_.give(std::move(s.start));
      events_.give(std::move(s.stop));
    }
    spans_ = std::move(unfinished);
    return sum_;
  }

 private:
  struct span {
    event start, stop;
    counts what;
  };

  std::optional<event> open_;  // the start of the span being queued
  std::vector<span> spans_;    // queued, not yet added
  event_pool events_{true};
  communication_seconds sum_;
  bool paused_ = false;
};

}  // namespace tpx::cuda

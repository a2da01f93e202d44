// The GPU's phase clock (spmd/phase_clock.hpp): each mark records a timing event on the rank's
// own stream, and a phase lasts from the event of its mark to the next mark's, as the stream
// reaches them. So a phase's time is the GPU's: its kernels and whatever the stream waited for
// between them (a launch the host had not yet queued, a collective), whatever the host thread did.
//
// Marks never wait: the spans between events are added up when totals() asks (which waits for
// the last mark's work), and in passing, without waiting, once many are pending. While the stream
// is being captured into a CUDA graph, marks are dropped (events recorded into a graph mark its
// dependencies and are never timed), and so is the phase open when the capture began.
#pragma once

#include <cuda_runtime.h>

#include <string_view>
#include <utility>
#include <vector>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/stream.hpp"
#include "tpx/spmd/phase_clock.hpp"

namespace tpx::cuda {

class phase_clock final : public tpx::phase_clock {
 public:
  explicit phase_clock(cudaStream_t stream) : stream_(stream) {}

  void mark(std::string_view name) override {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    TPX_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    if (capture != cudaStreamCaptureStatusNone) {
      if (!marks_.empty()) marks_.back().phase = -1;  // the open phase would hold the capture
      return;
    }
    event e = events_.take();
    e.record(stream_);
    marks_.push_back({name.empty() ? -1 : index_of(name), std::move(e)});
    if (marks_.size() >= pending_limit) add_finished(false);
  }

 private:
  struct marked {
    int phase;  // the phase this mark starts, -1 for none
    event at;
  };
  static constexpr std::size_t pending_limit = 1024;

  void settle() override { add_finished(true); }

  // Adds the spans between consecutive marks whose end has been reached (all of them, having
  // waited for the last, when `wait`), keeping the last mark as the start of the next span.
  void add_finished(bool wait) {
    if (marks_.empty()) return;
    if (wait) marks_.back().at.synchronize();
    std::size_t i = 0;
    for (; i + 1 < marks_.size() && (wait || marks_[i + 1].at.done()); ++i) {
      if (marks_[i].phase >= 0) add(marks_[i].phase, elapsed_ms(marks_[i].at, marks_[i + 1].at) / 1e3);
      events_.give(std::move(marks_[i].at));
    }
    marks_.erase(marks_.begin(), marks_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  cudaStream_t stream_;
  std::vector<marked> marks_;
  event_pool events_{true};
};

}  // namespace tpx::cuda

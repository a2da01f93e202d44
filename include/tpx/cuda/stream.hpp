// Owning handles for a CUDA stream and a CUDA event, so that a rank's resources and a
// communicator's ordering events are released however a rank ends (normally or by exception).
//
// Streams are created non-blocking: they never synchronize implicitly with the legacy default
// stream, so ranks that share one GPU (the simulated mesh) and NCCL's stream run concurrently.
// Events are created without timing unless asked (timing events are slower to record), and are
// what orders one stream after another (wait_for) without blocking the host. An event_pool
// keeps the events a clock or communicator records per piece of work, for reuse.
#pragma once

#include <cuda_runtime.h>

#include <utility>
#include <vector>

#include "tpx/cuda/check.hpp"

namespace tpx::cuda {

class event {
 public:
  explicit event(bool timing = false) {
    TPX_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  event(event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  event& operator=(event other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }
  ~event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream) { TPX_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  // Whether the work recorded before it has finished (never blocks).
  bool done() const {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    TPX_CUDA_CHECK(status);
    return true;
  }
  void synchronize() const { TPX_CUDA_CHECK(cudaEventSynchronize(event_)); }
  // Milliseconds between two recorded timing events.
  friend float elapsed_ms(const event& start, const event& stop) {
    float ms = 0;
    TPX_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, stop.event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// Events made once and reused: what a clock or a communicator records around each piece of work
// it queues, given back once that work has finished.
class event_pool {
 public:
  explicit event_pool(bool timing) : timing_(timing) {}
  event take() {
    if (spare_.empty()) return event(timing_);
    event e = std::move(spare_.back());
    spare_.pop_back();
    return e;
  }
  void give(event e) { spare_.push_back(std::move(e)); }

 private:
  bool timing_;
  std::vector<event> spare_;
};

class stream {
 public:
  stream() { TPX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  stream(stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  stream& operator=(stream other) noexcept {
    std::swap(stream_, other.stream_);
    return *this;
  }
  ~stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  cudaStream_t get() const { return stream_; }
  void synchronize() const { TPX_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  // Work submitted to this stream from now on starts after the work recorded in e.
  void wait_for(const event& e) const { TPX_CUDA_CHECK(cudaStreamWaitEvent(stream_, e.get(), 0)); }

 private:
  cudaStream_t stream_ = nullptr;
};

// Where a device buffer's work goes (device_buffer.hpp): a fixed stream, or the one a slot holds
// at each use, the rank's current stream (rank_resources.hpp: its own, or its background lane's
// while a background task runs), so that a tensor is freed, and copied, in the order of the work
// the rank queues at that moment, whichever stream it was allocated on.
class stream_ref {
 public:
  stream_ref(cudaStream_t fixed) : fixed_(fixed) {}  // implicit: a stream is a fixed stream_ref
  explicit stream_ref(const cudaStream_t* slot) : slot_(slot) {}
  cudaStream_t get() const { return slot_ != nullptr ? *slot_ : fixed_; }

 private:
  cudaStream_t fixed_ = nullptr;
  const cudaStream_t* slot_ = nullptr;
};

}  // namespace tpx::cuda

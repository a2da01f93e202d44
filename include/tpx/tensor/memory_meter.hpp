// memory_meter: the bytes of tensor memory one rank holds now, and the most it has held, for the
// trainers' "peak memory per rank" (issue 11) and for anyone sizing a layout by measurement.
//
// Every rank_context owns one (rank_context::memory()). The memory spaces count what they
// allocate for that rank's tensors and temporaries: host buffers through their allocator
// (tensor/host_buffer.hpp), device buffers at allocation and free (cuda/device_buffer.hpp), so
// the figure is the rank's own even where ranks share a process or a GPU's pool. Counts are
// relaxed atomics: a rank's buffers may be freed by another thread (a communication thread,
// a launcher joining ranks), and the peak is a high-water mark, raised with compare-exchange.
// Memory a library keeps for itself (BLAS, cuBLASLt workspaces, NCCL) is not counted.
#pragma once

#include <atomic>
#include <cstdint>

namespace tpx {

class memory_meter {
 public:
  memory_meter() = default;
  // A copy starts from nothing: it meters the memory of whatever is made with it from now on.
  memory_meter(const memory_meter&) noexcept {}
  memory_meter& operator=(const memory_meter&) = delete;

  void add(std::int64_t bytes) noexcept {
    const std::int64_t now = live_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  void remove(std::int64_t bytes) noexcept { live_.fetch_sub(bytes, std::memory_order_relaxed); }

  std::int64_t live_bytes() const noexcept { return live_.load(std::memory_order_relaxed); }
  std::int64_t peak_bytes() const noexcept { return peak_.load(std::memory_order_relaxed); }
  // Starts a new high-water mark from what is held now (e.g. after setup, before training).
  void reset_peak() noexcept { peak_.store(live_bytes(), std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> live_{0};
  std::atomic<std::int64_t> peak_{0};
};

}  // namespace tpx

// HostFailure: the first failure reported in a HostWorld, kept so that every rank can be told.
//
// When a rank thread throws, the SPMD launcher reports it through HostWorld::abort; from then on
// every collective of every group of that world throws comm_error quoting this record instead of
// waiting for a rank that will never come. Only the first report is kept: the ranks that then
// fail with comm_error report the same failure again, and the user wants to see where it began.
// happened() is one atomic load, cheap enough for the wait loop of every collective.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <string_view>

namespace tpx::detail {

class HostFailure {
 public:
  // Records that `world_rank` failed with `what`, unless a failure is already recorded.
  // Returns whether this report was the one recorded. It never throws: it is called while a
  // rank's failure is being handled, often one of running out of memory, and then the failure
  // is recorded with a shorter reason that needs no memory for `what`.
  bool record(int world_rank, std::string_view what) noexcept {
    std::lock_guard lock(mutex_);
    if (happened_.load(std::memory_order_relaxed)) return false;
    try {
      reason_ = "rank " + std::to_string(world_rank) + " failed: " + std::string(what);
    } catch (...) {
      reason_.clear();
      world_rank_ = world_rank;
    }
    happened_.store(true, std::memory_order_release);
    return true;
  }

  bool happened() const noexcept { return happened_.load(std::memory_order_acquire); }

  // "rank 2 failed: <what>", or empty while nothing failed.
  std::string reason() const {
    std::lock_guard lock(mutex_);
    if (reason_.empty() && happened_.load(std::memory_order_relaxed))
      return "rank " + std::to_string(world_rank_) + " failed (out of memory for its message)";
    return reason_;
  }

 private:
  std::atomic<bool> happened_{false};
  mutable std::mutex mutex_;
  std::string reason_;
  int world_rank_ = -1;  // the failed rank, kept apart when reason_ could not be made
};

}  // namespace tpx::detail

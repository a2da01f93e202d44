// HostGroup: what the ranks of one group of a HostWorld share, and the meeting point they use.
//
// A host collective is "publish pointers, meet, read the peers' buffers directly, meet again".
// Each rank publishes a Publication (which collective it calls, where its input and, for
// all_reduce, its output lie) through exchange(), which waits for the whole group and then checks that every rank
// called the same collective; a mismatch throws comm_error on every rank, before anyone reads a
// peer's buffer. That first meeting of a collective is the only one that can fail: it gives up
// when the world has been aborted, or after the world's timeout, naming the ranks that never
// came, and the group is unusable from then on. The meetings inside a collective
// (wait_for_all) cannot fail: once every rank has passed exchange(), each only copies and sums
// memory before arriving, so waiting for it is always safe, and it keeps a failing rank from
// freeing a buffer that a peer still reads.
//
// The meeting is a generation-counted barrier on a mutex and condition variable. Its lock orders
// each rank's writes before arriving against every peer's reads after leaving, which is what
// makes the published pointers and the buffers behind them safe to read (and clean under TSan).
// Publications alternate between two slots by step, so a rank that has left one collective may
// publish its next while a slow peer still checks the previous one.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpx/comm/collective_descriptor.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/host_failure.hpp"

namespace tpx::detail {

// "{0,2,5}"
inline std::string bracketed(std::span<const int> ranks) {
  std::string text = "{";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i != 0) text += ',';
    text += std::to_string(ranks[i]);  // appended, not `"," + ...`: GCC 12 -O3 -Wrestrict
  }
  return text + "}";
}

class HostGroup {
 public:
  // What one rank publishes for one collective.
  struct Publication {
    CollectiveDescriptor call;
    const void* input = nullptr;
    void* output = nullptr;  // all_reduce: every rank writes the chunk it owns into it
  };

  // `world_ranks` lists the members in group-rank order; `failure` is the world's.
  HostGroup(std::vector<int> world_ranks, std::chrono::milliseconds timeout,
            const HostFailure& failure)
      : world_ranks_(std::move(world_ranks)),
        timeout_(timeout),
        failure_(&failure),
        publications_{std::vector<Publication>(world_ranks_.size()),
                      std::vector<Publication>(world_ranks_.size())},
        steps_(world_ranks_.size(), 0),
        present_(world_ranks_.size(), false) {}

  int size() const noexcept { return static_cast<int>(world_ranks_.size()); }
  std::span<const int> world_ranks() const noexcept { return world_ranks_; }

  // Publishes group rank `rank`'s call, input and output, waits for every rank and checks
  // that all made the same call. Returns every rank's publication, in group-rank order, valid
  // until this rank's next exchange.
  std::span<const Publication> exchange(int rank, const CollectiveDescriptor& call,
                                        const void* input = nullptr,
                                        void* output = nullptr) {
    std::vector<Publication>& slot = publications_[steps_[rank]++ % 2];
    slot[rank] = Publication{call, input, output};
    meet(rank, call.op, /*can_fail=*/true);
    check_same_call(slot);
    return slot;
  }

  // Waits for every rank, with no timeout: only for the meetings after exchange().
  void wait_for_all(int rank) { meet(rank, CollectiveOp::barrier, /*can_fail=*/false); }

  // Wakes the waiting ranks so they notice the world's failure (HostWorld::abort).
  void wake_all() {
    // Passing through the lock means every waiter is either asleep (and woken below) or has yet
    // to check for the failure, which was recorded before: no wake-up is lost.
    { std::lock_guard lock(mutex_); }
    everyone_arrived_.notify_all();
  }

 private:
  void meet(int rank, CollectiveOp op, bool can_fail) {
    std::unique_lock lock(mutex_);
    if (can_fail) throw_if_unusable(op);
    present_[rank] = true;
    if (++arrived_ == size()) {
      arrived_ = 0;
      std::fill(present_.begin(), present_.end(), false);
      ++generation_;
      lock.unlock();
      everyone_arrived_.notify_all();
      return;
    }
    const std::uint64_t generation = generation_;
    const auto all_arrived = [&] { return generation_ != generation; };
    if (!can_fail) {
      everyone_arrived_.wait(lock, all_arrived);
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (!all_arrived()) {
      throw_if_unusable(op);
      if (everyone_arrived_.wait_until(lock, deadline) == std::cv_status::timeout &&
          !all_arrived() && broken_.empty()) {
        const std::string timed_out = "timed out after " + std::to_string(timeout_.count()) +
                                      " ms: world ranks " + missing_ranks() + " never arrived";
        broken_ = std::string(op_name(op)) + " " + timed_out;
        lock.unlock();
        everyone_arrived_.notify_all();
        throw comm_error(collective_on_group(op) + " " + timed_out);
      }
    }
  }

  // "tpx: collective all_gather on group {0,1}"
  std::string collective_on_group(CollectiveOp op) const {
    return "tpx: collective " + std::string(op_name(op)) + " on group " + bracketed(world_ranks_);
  }

  void throw_if_unusable(CollectiveOp op) const {
    if (!broken_.empty()) throw comm_error(collective_on_group(op) + " aborted: " + broken_);
    if (failure_->happened()) {
      throw comm_error(collective_on_group(op) + " aborted: " + failure_->reason());
    }
  }

  // The members, in world numbering, that have not arrived at the current meeting.
  std::string missing_ranks() const {
    std::vector<int> missing;
    for (int r = 0; r < size(); ++r) {
      if (!present_[r]) missing.push_back(world_ranks_[r]);
    }
    return bracketed(missing);
  }

  void check_same_call(std::span<const Publication> calls) const {
    for (int r = 1; r < size(); ++r) {
      if (calls[r].call == calls[0].call) continue;
      const std::string first = describe(calls[0].call);
      const std::string other = describe(calls[r].call);
      throw comm_error("tpx: mismatched collectives on group " + bracketed(world_ranks_) +
                       ": rank 0 (world " + std::to_string(world_ranks_[0]) + ") called " + first +
                       " but rank " + std::to_string(r) + " (world " +
                       std::to_string(world_ranks_[r]) + ") called " + other +
                       (first == other ? " with different per-rank counts" : ""));
    }
  }

  const std::vector<int> world_ranks_;
  const std::chrono::milliseconds timeout_;
  const HostFailure* failure_;
  std::array<std::vector<Publication>, 2> publications_;  // [step % 2][rank]
  std::vector<std::uint64_t> steps_;                      // [rank], each touched by its rank only

  std::mutex mutex_;  // guards everything below
  std::condition_variable everyone_arrived_;
  std::uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<bool> present_;  // [rank]: arrived at the current meeting
  std::string broken_;         // why the group is unusable, or empty
};

}  // namespace tpx::detail

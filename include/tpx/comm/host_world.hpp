// HostWorld: N ranks that are threads of one process, the groups they form, and how they fail.
//
// Create one HostWorld for N ranks before starting the rank threads and register the groups the
// program will use; then each rank thread builds a HostCommunicator (host_communicator.hpp) for
// every group it belongs to. Groups are registered in sets: add_groups takes disjoint groups of
// world ranks, each listed in group-rank order, and returns the id of the set, so a mesh
// registers "the rows", "the columns" and "everyone" once, and a rank then asks for "my row" by
// (set id, its world rank). Set 0, HostWorld::whole_world, is made by the constructor: the one
// group of all ranks in order.
//
// The world also carries failure. When a rank thread throws, the launcher calls abort(rank,
// what): every rank waiting in, or later entering, a collective of any group then throws
// comm_error naming that rank and its message. When a rank thread returns, the launcher calls
// finish(rank): a collective of one of its groups that it did not join, waiting or to come,
// then throws comm_error at once naming it (the collective sits in rank-dependent control flow).
// When every rank that has not returned waits in a collective that can never complete (ranks in
// a cycle across groups, or one that skipped or added a collective while the others wait), each
// throws comm_error at once with the same picture of who waits in which collective of which
// group and who never came to it (host_waits.hpp). A rank that waits longer than options.timeout at
// the start of a collective throws comm_error naming the ranks (in world numbering) that never
// arrived, and its group throws for everyone from then on. No mistake ends in a silent hang.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tpx/comm/host_failure.hpp"
#include "tpx/comm/host_group.hpp"
#include "tpx/comm/host_returns.hpp"
#include "tpx/comm/host_waits.hpp"

namespace tpx {

struct HostWorldOptions {
  // How long a rank waits at the start of a collective for the rest of its group.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

class HostWorld {
 public:
  // The id of the group set made by the constructor: all ranks, in world order.
  static constexpr int whole_world = 0;

  explicit HostWorld(int size, HostWorldOptions options = {})
      : size_(valid_size(size)), options_(options), returns_(size_), waits_(size_, returns_) {
    std::vector<int> everyone(static_cast<std::size_t>(size));
    std::iota(everyone.begin(), everyone.end(), 0);
    add_groups({everyone});
  }

  HostWorld(const HostWorld&) = delete;
  HostWorld& operator=(const HostWorld&) = delete;

  int size() const noexcept { return size_; }
  const HostWorldOptions& options() const noexcept { return options_; }

  // Registers disjoint groups of world ranks, each in group-rank order (they need not cover
  // the world), and returns the id of the set. `label` names the set in error messages
  // ("mesh axis X"); `thread` says which thread of each rank uses it: its own, or its
  // communication thread (spmd/communication_thread.hpp). Safe to call from any thread.
  int add_groups(const std::vector<std::vector<int>>& groups, const std::string& label = {},
                 detail::RankThread thread = detail::RankThread::own) {
    std::vector<detail::HostGroup*> group_of_rank(static_cast<std::size_t>(size_), nullptr);
    std::vector<std::unique_ptr<detail::HostGroup>> made;
    for (const std::vector<int>& members : groups) {
      if (members.empty()) throw std::invalid_argument("tpx: add_groups was given an empty group");
      made.push_back(std::make_unique<detail::HostGroup>(members, label, thread, options_.timeout,
                                                         failure_, returns_, waits_));
      for (int rank : members) {
        if (rank < 0 || rank >= size_) {
          throw std::invalid_argument("tpx: add_groups: rank " + std::to_string(rank) +
                                      " is outside the world of " + std::to_string(size_));
        }
        if (group_of_rank[rank] != nullptr) {
          throw std::invalid_argument("tpx: add_groups: rank " + std::to_string(rank) +
                                      " is in two groups of one set");
        }
        group_of_rank[rank] = made.back().get();
      }
    }
    std::lock_guard lock(mutex_);
    for (auto& group : made) groups_.push_back(std::move(group));
    sets_.push_back(std::move(group_of_rank));
    return static_cast<int>(sets_.size()) - 1;
  }

  // The group of set `group_set` that `world_rank` belongs to (used by HostCommunicator).
  detail::HostGroup& group_of(int group_set, int world_rank) {
    std::lock_guard lock(mutex_);
    if (group_set < 0 || group_set >= static_cast<int>(sets_.size())) {
      throw std::invalid_argument("tpx: no group set " + std::to_string(group_set));
    }
    if (world_rank < 0 || world_rank >= size_ || sets_[group_set][world_rank] == nullptr) {
      throw std::invalid_argument("tpx: world rank " + std::to_string(world_rank) +
                                  " is in no group of set " + std::to_string(group_set));
    }
    return *sets_[group_set][world_rank];
  }

  // Reports that `world_rank` failed with `what`. Every collective of every group, waiting or
  // to come, throws comm_error naming the first rank reported. Safe to call from any thread,
  // and from a handler of any failure, out of memory included: it never throws.
  void abort(int world_rank, std::string_view what) noexcept {
    if (failure_.record(world_rank, what)) wake_all();
  }

  // Reports that `world_rank` has returned and will call no more collectives. Every collective
  // of its groups that it has not joined, waiting or to come, throws comm_error at once naming
  // it, the ranks that joined and the collective. Safe to call from any thread.
  void finish(int world_rank) {
    if (world_rank < 0 || world_rank >= size_) {
      throw std::invalid_argument("tpx: finish: rank " + std::to_string(world_rank) +
                                  " is outside the world of " + std::to_string(size_));
    }
    returns_.record(world_rank);
    waits_.rank_returned();  // if that deadlocked the world, the waiting ranks throw once woken
    wake_all();
  }

  // Reports that `thread` of `world_rank` is idle, waiting only for the rank's other thread, or
  // no longer (spmd/communication_thread.hpp): a world whose every rank is stuck, each thread
  // waiting in a collective or idle, is deadlocked (host_waits.hpp). Safe to call from any
  // thread holding no group's lock.
  void set_idle(int world_rank, detail::RankThread thread, bool idle) {
    for (detail::HostGroup* group : waits_.set_idle(world_rank, thread, idle)) group->wake_all();
  }

  // "rank 2 failed: <what>" once some rank was reported through abort().
  std::optional<std::string> failure() const {
    if (!failure_.happened()) return std::nullopt;
    return failure_.reason();
  }

 private:
  static int valid_size(int size) {
    if (size < 1) throw std::invalid_argument("tpx: a HostWorld needs at least one rank");
    return size;
  }

  // Wakes every waiting rank to look at the world's failure and returns again.
  void wake_all() noexcept {
    std::lock_guard lock(mutex_);
    for (auto& group : groups_) group->wake_all();
  }

  const int size_;
  const HostWorldOptions options_;
  detail::HostFailure failure_;
  detail::HostReturns returns_;
  detail::HostWaits waits_;
  std::mutex mutex_;  // guards groups_ and sets_
  std::vector<std::unique_ptr<detail::HostGroup>> groups_;
  std::vector<std::vector<detail::HostGroup*>> sets_;  // [set][world rank] -> its group or null
};

}  // namespace tpx

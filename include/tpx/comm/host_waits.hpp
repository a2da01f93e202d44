// HostWaits: which collective each rank of a HostWorld waits in, so that a world in which no
// collective can complete any more fails at once, with the picture of who waits for whom,
// instead of after the timeout.
//
// A rank that skips a collective, calls one more than its peers, or waits in one group's
// collective while a peer waits in another group's (a cycle: rank 0 in its row's, rank 1 in the
// world's) blocks the others for good. When a rank that skipped returns, the collective it
// deserted fails at once (host_returns.hpp); but often no rank returns: every rank waits. On the
// thread backend every rank's state can be seen, so a rank that has spun through its wait at the
// first meeting of a collective (HostGroup::meet_or_fail) records here, before it sleeps, the
// collective it waits in: its number, group and call. The rank that completes the meeting
// erases the records of the ranks it releases, under the group's lock, before they can even
// wake; a rank that leaves a meeting by throwing erases its own. So a record always stands for a
// meeting that has not completed, or for one whose last arriver, a rank that is not waiting, is
// erasing it. When every rank that has not returned is recorded as waiting, no rank is left to
// come to any of those meetings: the world is deadlocked. The rank whose record (or return,
// HostWorld::finish) made it so writes the wait-for picture once and wakes the groups, and each
// waiting rank throws comm_error with it. Ranks that have not started, are computing, spin
// before sleeping, wait in a collective's later meetings (which always complete: host_group.hpp)
// or have failed are not waiting, and one of them holds the verdict back: it is never given
// while some rank could still come. Only ranks that go to sleep touch this record (one lock
// each time), so collectives whose ranks meet within the spin never see it.
//
// Lock order: a group's mutex, then this record's; never the other way.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tpx/comm/collective_descriptor.hpp"
#include "tpx/comm/group_name.hpp"
#include "tpx/comm/host_returns.hpp"

namespace tpx::detail {

class HostGroup;

class HostWaits {
 public:
  // Where a rank waits: the first meeting of collective #sequence on a group.
  struct Wait {
    HostGroup* group;              // to wake it once the world is deadlocked
    std::span<const int> members;  // the group's world ranks, in group-rank order
    std::string_view group_name;   // "group {0,1} (mesh axis X)"
    std::uint64_t sequence;
    CollectiveDescriptor call;
  };

  HostWaits(int world_size, const HostReturns& returns)
      : returns_(&returns), waits_(static_cast<std::size_t>(world_size)) {}

  // Records that `world_rank` waits as `where` says (its group's mutex held). If now every rank
  // that has not returned waits, the world is deadlocked: returns the groups whose ranks must be
  // woken to throw (the caller wakes them once it holds no group's mutex); else nothing.
  std::vector<HostGroup*> start_waiting(int world_rank, const Wait& where) {
    std::lock_guard lock(mutex_);
    waits_[world_rank] = where;
    ++waiting_;
    if (!stuck()) return {};
    std::vector<HostGroup*> groups;
    for (const std::optional<Wait>& w : waits_)
      if (w && std::ranges::find(groups, w->group) == groups.end()) groups.push_back(w->group);
    return groups;
  }

  // Erases the record of `world_rank`, if any (its group's mutex held).
  void stop_waiting(int world_rank) {
    std::lock_guard lock(mutex_);
    if (!waits_[world_rank]) return;
    waits_[world_rank].reset();
    --waiting_;
  }

  // Called once a rank has returned (recorded in HostReturns first): that may leave the world
  // deadlocked, and the caller then wakes every group.
  void rank_returned() {
    std::lock_guard lock(mutex_);
    stuck();
  }

  bool deadlocked() const noexcept { return deadlocked_.load(std::memory_order_acquire); }

  // The wait-for picture, once deadlocked() (written once, before the flag, and never again).
  const std::string& picture() const noexcept { return picture_; }

 private:
  // Whether some rank waits and every rank that has not returned does (mutex_ held); if so, the
  // first time, writes the picture and sets the flag.
  bool stuck() {
    if (waiting_ == 0 || deadlocked_) return false;
    for (std::size_t r = 0; r < waits_.size(); ++r)
      if (!waits_[r] && !returns_->returned(static_cast<int>(r))) return false;
    picture_ = describe_waits();
    deadlocked_.store(true, std::memory_order_release);
    return true;
  }

  // "deadlock: ...: world rank 0 waits in collective #1 on group {0,1} (mesh axis Y), barrier,
  // where {1} never came; world ranks {1,2,3} wait in ..., where {0} never came. Is ...?"
  // One entry per distinct wait (group, number and call), in the order of its first world rank.
  std::string describe_waits() const {
    std::string text =
        "deadlock: no collective can complete, every rank that has not returned waits in one: ";
    std::vector<bool> told(waits_.size(), false);
    bool first = true;
    for (std::size_t r = 0; r < waits_.size(); ++r) {
      if (!waits_[r] || told[r]) continue;
      const Wait& wait = *waits_[r];
      std::vector<int> alike;  // the ranks waiting as r does
      for (std::size_t s = r; s < waits_.size(); ++s) {
        if (waits_[s] && waits_[s]->group == wait.group && waits_[s]->sequence == wait.sequence &&
            waits_[s]->call == wait.call) {
          alike.push_back(static_cast<int>(s));
          told[s] = true;
        }
      }
      std::vector<int> absent, returned;  // members waiting in no collective of this group
      for (int m : wait.members) {
        if (waits_[m] && waits_[m]->group == wait.group) continue;
        (returns_->returned(m) ? returned : absent).push_back(m);
      }
      if (!first) text += "; ";
      first = false;
      // Appended piece by piece: `"..." + std::to_string(...)` trips GCC 12's -Wrestrict at -O3.
      text += alike.size() == 1 ? "world rank " : "world ranks ";
      text += alike.size() == 1 ? std::to_string(alike[0]) : bracketed(alike);
      text += alike.size() == 1 ? " waits" : " wait";
      text += " in collective #";
      text += std::to_string(wait.sequence);
      text += " on ";
      text += wait.group_name;
      text += ", ";
      text += describe(wait.call);
      if (!absent.empty()) {
        text += ", where ";
        text += bracketed(absent);
        text += " never came";
      }
      if (!returned.empty()) {
        text += absent.empty() ? ", where " : " and ";
        text += bracketed(returned);
        text += " returned";
      }
    }
    text +=
        ". Is a collective inside rank-dependent control flow, or do ranks call the collectives "
        "of different groups in different orders?";
    return text;
  }

  const HostReturns* returns_;
  std::mutex mutex_;  // guards everything below but deadlocked_ and, once it is set, picture_
  std::vector<std::optional<Wait>> waits_;  // [world rank]: where it waits, if it does
  int waiting_ = 0;                         // ranks with a record
  std::atomic<bool> deadlocked_{false};
  std::string picture_;
};

}  // namespace tpx::detail

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
// A rank has two threads (spmd/communication_thread.hpp): its own, and a communication thread
// that runs its background collectives on groups of their own. Each has its record here, and a
// rank is stuck only when both are: each waits at a first meeting, or is idle, waiting for
// nothing but the other thread (the own thread for a background task to finish, the
// communication thread for a task to run: it is idle until its first). A communication thread
// that runs a task, or an own thread that computes, can still come to a meeting, so it holds
// the verdict back like any rank that is not waiting. The threads report idleness under the
// communication thread's lock, a task's end waking its waiter before the thread goes idle, so
// that two threads of one rank are never both seen idle while one of them has work.
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

// Which of a rank's threads a record is about.
enum class RankThread { own, communication };

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
      : returns_(&returns),
        world_size_(world_size),
        waits_(2 * static_cast<std::size_t>(world_size)),
        idle_(2 * static_cast<std::size_t>(world_size), false) {
    for (int r = 0; r < world_size; ++r) idle_[slot(r, RankThread::communication)] = true;
  }

  // Records that `thread` of `world_rank` waits as `where` says (its group's mutex held). If now
  // no rank that has not returned can go on, the world is deadlocked: returns the groups whose
  // ranks must be woken to throw (the caller wakes them once it holds no group's mutex); else
  // nothing.
  std::vector<HostGroup*> start_waiting(int world_rank, RankThread thread, const Wait& where) {
    std::lock_guard lock(mutex_);
    waits_[slot(world_rank, thread)] = where;
    ++waiting_;
    return groups_to_wake();
  }

  // Erases the record of `thread` of `world_rank`, if any (its group's mutex held).
  void stop_waiting(int world_rank, RankThread thread) {
    std::lock_guard lock(mutex_);
    std::optional<Wait>& wait = waits_[slot(world_rank, thread)];
    if (!wait) return;
    wait.reset();
    --waiting_;
  }

  // Records that `thread` of `world_rank` is idle, waiting only for the rank's other thread, or
  // no longer (see the top of the file). Returns the groups to wake, as start_waiting does.
  std::vector<HostGroup*> set_idle(int world_rank, RankThread thread, bool idle) {
    std::lock_guard lock(mutex_);
    idle_[slot(world_rank, thread)] = idle;
    return idle ? groups_to_wake() : std::vector<HostGroup*>{};
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
  std::size_t slot(int world_rank, RankThread thread) const {
    return static_cast<std::size_t>(world_rank +
                                    (thread == RankThread::communication ? world_size_ : 0));
  }

  // The groups of every waiting thread if the world just became deadlocked, else none (mutex_
  // held).
  std::vector<HostGroup*> groups_to_wake() {
    if (!stuck()) return {};
    std::vector<HostGroup*> groups;
    for (const std::optional<Wait>& w : waits_)
      if (w && std::ranges::find(groups, w->group) == groups.end()) groups.push_back(w->group);
    return groups;
  }

  // Whether some thread waits at a meeting and every rank that has not returned is stuck, both
  // its threads waiting or idle (mutex_ held); if so, the first time, writes the picture and sets
  // the flag.
  bool stuck() {
    if (waiting_ == 0 || deadlocked_) return false;
    for (int r = 0; r < world_size_; ++r) {
      if (returns_->returned(r)) continue;
      for (const RankThread thread : {RankThread::own, RankThread::communication})
        if (!waits_[slot(r, thread)] && !idle_[slot(r, thread)]) return false;
    }
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
    for (std::size_t w = 0; w < waits_.size(); ++w) {
      if (!waits_[w] || told[w]) continue;
      const Wait& wait = *waits_[w];
      const RankThread thread =
          w < static_cast<std::size_t>(world_size_) ? RankThread::own : RankThread::communication;
      std::vector<int> alike;  // the ranks whose same thread waits as w does
      for (std::size_t s = w; s < waits_.size(); ++s) {
        if (waits_[s] && waits_[s]->group == wait.group && waits_[s]->sequence == wait.sequence &&
            waits_[s]->call == wait.call) {
          alike.push_back(static_cast<int>(s) % world_size_);
          told[s] = true;
        }
      }
      std::vector<int> absent, returned;  // members waiting in no collective of this group
      for (int m : wait.members) {
        const std::optional<Wait>& theirs = waits_[slot(m, thread)];
        if (theirs && theirs->group == wait.group) continue;
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
    std::vector<int> waiting_for_tasks;  // own threads idle until a background task ends
    for (int r = 0; r < world_size_; ++r)
      if (idle_[slot(r, RankThread::own)] && !returns_->returned(r)) waiting_for_tasks.push_back(r);
    if (!waiting_for_tasks.empty()) {
      text += "; world rank";
      text += waiting_for_tasks.size() == 1 ? " " : "s ";
      text += waiting_for_tasks.size() == 1 ? std::to_string(waiting_for_tasks[0])
                                            : bracketed(waiting_for_tasks);
      text += waiting_for_tasks.size() == 1
                  ? " waits for a background task of its communication thread"
                  : " wait for background tasks of their communication threads";
    }
    text +=
        ". Is a collective inside rank-dependent control flow, or do ranks call the collectives "
        "of different groups in different orders?";
    return text;
  }

  const HostReturns* returns_;
  const int world_size_;
  std::mutex mutex_;  // guards everything below but deadlocked_ and, once it is set, picture_
  std::vector<std::optional<Wait>> waits_;  // [slot(rank, thread)]: where it waits, if it does
  std::vector<bool> idle_;                  // [slot(rank, thread)]: idle (see the top)
  int waiting_ = 0;                         // threads with a wait recorded
  std::atomic<bool> deadlocked_{false};
  std::string picture_;
};

}  // namespace tpx::detail

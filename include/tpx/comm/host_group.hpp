// HostGroup: what the ranks of one group of a HostWorld share, and the meeting point they use.
//
// A host collective is "publish pointers, meet, read the peers' buffers directly, meet again".
// Each rank publishes a Publication (which collective it calls, where its input and, for
// all_reduce, its output lie) through exchange(), which waits for the whole group and then
// checks that every rank called the same collective; a mismatch throws comm_error on every
// rank, naming the collective's number on the group (#1 is the group's first) and the ranks that
// deviated from the call most ranks made (or, with no such call, every call and its ranks),
// before anyone reads a peer's buffer. Ranks meet by arrival order, so every rank at a meeting
// is at the same number. That first meeting of a collective is the only one that can fail, and
// it fails for everyone, with one message naming the collective by number, group and call:
//   - at once, when the world has been aborted (a rank threw: host_failure.hpp);
//   - at once, when a member that has not come has returned (HostWorld::finish,
//     host_returns.hpp) and so never will: the message lists who joined, who returned and who
//     had not come yet, and asks about rank-dependent control flow, the usual cause;
//   - at once, when every rank of the world that has not returned waits at such a first meeting
//     and so none can complete (a cycle across groups, a collective skipped or added while no
//     rank has returned): every waiting rank throws the same wait-for picture, who waits in
//     which collective of which group and who never came (host_waits.hpp);
//   - after the world's timeout, naming the ranks that never arrived.
// The group is then unusable: any later collective on it throws, quoting why. The meetings
// inside a collective (wait_for_all) cannot fail: once every rank has passed exchange(), each
// only copies and sums memory before arriving, so waiting for it is always safe, and it keeps a
// failing rank from freeing a buffer that a peer still reads.
//
// The meeting is a generation-counted barrier on a mutex and condition variable; a waiting rank
// sleeps until the last arrival, a wake_all() (the world failed or is deadlocked, or a rank
// returned) or the timeout, and checks the world's state under the mutex before each sleep; at
// the first meeting it also records itself as waiting in the world's HostWaits before it sleeps,
// and the last to arrive erases those records of the ranks it releases before they wake. Its lock
// orders each rank's writes before arriving against every peer's reads after leaving, which is what
// makes the published pointers and the buffers behind them safe to read (and clean under TSan).
// A rank that arrives early first watches the generation (an atomic, advanced under the lock by
// the last to arrive, read with acquire: the same ordering) for up to spin_before_sleep without
// the lock, yielding its core between looks, and only then takes the lock, checks the world's
// state and sleeps as above: between the collectives of a small training step the peers are a
// few microseconds away, and putting every waiter to sleep and waking it again cost more than
// the step's arithmetic (the 2x1 mesh ran the demo step 1.5x slower than 1x1). A failure or a
// return is so noticed at most spin_before_sleep later, and a rank counts as waiting for the
// deadlock check only once it has spun in vain: meetings that end within the spin never touch
// the world's record.
// Publications alternate between two slots by number, so a rank that has left one collective
// may publish its next while a slow peer still checks the previous one.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tpx/comm/collective_descriptor.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/group_name.hpp"
#include "tpx/comm/host_failure.hpp"
#include "tpx/comm/host_returns.hpp"
#include "tpx/comm/host_waits.hpp"

namespace tpx::detail {

class HostGroup {
 public:
  // What one rank publishes for one collective.
  struct Publication {
    CollectiveDescriptor call;
    const void* input = nullptr;
    void* output = nullptr;  // all_reduce: every rank writes the chunk it owns into it
  };

  // `world_ranks` lists the members in group-rank order; `label` says what the group is, for
  // messages ("mesh axis X"; may be empty); `thread`, which of its members' threads use it;
  // `failure`, `returns` and `waits` are the world's.
  HostGroup(std::vector<int> world_ranks, std::string label, RankThread thread,
            std::chrono::milliseconds timeout, const HostFailure& failure,
            const HostReturns& returns, HostWaits& waits)
      : world_ranks_(std::move(world_ranks)),
        name_(group_name(world_ranks_, label)),
        thread_(thread),
        timeout_(timeout),
        failure_(&failure),
        returns_(&returns),
        waits_(&waits),
        publications_{std::vector<Publication>(world_ranks_.size()),
                      std::vector<Publication>(world_ranks_.size())},
        sequences_(world_ranks_.size(), 0),
        present_(world_ranks_.size(), false),
        waiting_(world_ranks_.size(), false) {}

  int size() const noexcept { return static_cast<int>(world_ranks_.size()); }
  std::span<const int> world_ranks() const noexcept { return world_ranks_; }

  // Publishes group rank `rank`'s call, input and output, waits for every rank and checks
  // that all made the same call. Returns every rank's publication, in group-rank order, valid
  // until this rank's next exchange.
  std::span<const Publication> exchange(int rank, const CollectiveDescriptor& call,
                                        const void* input = nullptr, void* output = nullptr) {
    const std::uint64_t sequence = ++sequences_[rank];
    std::vector<Publication>& slot = publications_[sequence % 2];
    slot[rank] = Publication{call, input, output};
    meet_or_fail(rank, call, sequence);
    check_same_call(slot, sequence);
    return slot;
  }

  // Waits for every rank, with no timeout: only for the meetings after exchange().
  void wait_for_all(int rank) {
    std::unique_lock lock(mutex_);
    const std::uint64_t generation = generation_.load(std::memory_order_relaxed);
    if (arrive(rank)) {
      lock.unlock();
      everyone_arrived_.notify_all();
      return;
    }
    if (ended_while_spinning(lock, generation)) return;
    everyone_arrived_.wait(lock, [&] { return generation_ != generation; });
  }

  // Wakes the waiting ranks so they notice a failure or a return (HostWorld::abort, finish).
  void wake_all() {
    // Passing through the lock means every waiter is either asleep (and woken below) or has yet
    // to check the world's state, which was recorded before: no wake-up is lost.
    { std::lock_guard lock(mutex_); }
    everyone_arrived_.notify_all();
  }

 private:
  // Why the group can be used no more: the first of its collectives that failed to meet.
  struct Breakdown {
    std::uint64_t sequence = 0;
    CollectiveDescriptor call;
    std::string what;  // "collective #2 on group {0,1,2}, barrier, timed out after ..."
  };

  // Marks `rank` present at the current meeting (mutex_ held). If it is the last to come, the
  // meeting ends and the next begins, and arrive returns true: the caller wakes the others.
  bool arrive(int rank) {
    present_[rank] = true;
    if (++arrived_ < size()) return false;
    arrived_ = 0;
    std::fill(present_.begin(), present_.end(), false);
    // The ranks recorded as waiting are released now, before they wake (host_waits.hpp).
    if (waiting_count_ > 0)
      for (int r = 0; r < size(); ++r) stop_waiting(r);
    // Release: a rank spinning in ended_while_spinning reads it without the lock.
    generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    return true;
  }

  // Called by a rank that arrived early at the meeting of `generation`, mutex_ held: releases
  // the lock and watches for the meeting's end for up to spin_before_sleep (see the top of the
  // file). Returns true, the lock released, if it ended; else false, the lock held again.
  bool ended_while_spinning(std::unique_lock<std::mutex>& lock, std::uint64_t generation) {
    lock.unlock();
    const auto stop_spinning = std::chrono::steady_clock::now() + spin_before_sleep;
    do {
      if (generation_.load(std::memory_order_acquire) != generation) return true;
      std::this_thread::yield();
    } while (std::chrono::steady_clock::now() < stop_spinning);
    lock.lock();
    return false;
  }

  // The first meeting of collective #sequence: throws comm_error if the group is broken, the
  // world failed or is deadlocked, a member returned without joining, or the timeout passes.
  void meet_or_fail(int rank, const CollectiveDescriptor& call, std::uint64_t sequence) {
    std::unique_lock lock(mutex_);
    throw_if_unusable(call, sequence);
    const std::uint64_t generation = generation_.load(std::memory_order_relaxed);
    if (arrive(rank)) {
      lock.unlock();
      everyone_arrived_.notify_all();
      return;
    }
    if (ended_while_spinning(lock, generation)) return;
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    try {
      while (generation_ == generation) {
        // Once the world is deadlocked, the failures reported are that deadlock, thrown by
        // faster ranks: every waiting rank reports the picture, or the desertion of its meeting.
        throw_if_broken(call, sequence);
        if (!waits_->deadlocked()) throw_if_failed(call, sequence);
        throw_if_deserted(call, sequence);
        if (waits_->deadlocked()) throw comm_error("tpx: " + waits_->picture());
        if (!waiting_[rank] && start_waiting(lock, rank, call, sequence)) continue;
        if (everyone_arrived_.wait_until(lock, deadline) == std::cv_status::timeout &&
            generation_ == generation && !broken_) {
          const std::string what = where(call, sequence) + " timed out after " +
                                   std::to_string(timeout_.count()) + " ms: world ranks " +
                                   bracketed(members_if([&](int r) { return !present_[r]; })) +
                                   " never arrived";
          broken_ = Breakdown{sequence, call, what};
          everyone_arrived_.notify_all();
          throw comm_error("tpx: " + what);
        }
      }
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      stop_waiting(rank);
      throw;
    }
  }

  // Records that `rank` sleeps at the current meeting (`lock` holds mutex_; host_waits.hpp).
  // Returns true if that left the world deadlocked: it has then woken every waiting rank, itself
  // holding no lock meanwhile, so that all throw the same picture.
  bool start_waiting(std::unique_lock<std::mutex>& lock, int rank, const CollectiveDescriptor& call,
                     std::uint64_t sequence) {
    waiting_[rank] = true;
    ++waiting_count_;
    const std::vector<HostGroup*> stuck = waits_->start_waiting(
        world_ranks_[rank], thread_, HostWaits::Wait{this, world_ranks_, name_, sequence, call});
    if (stuck.empty()) return false;
    lock.unlock();  // a group's mutex is never held while taking another's
    for (HostGroup* group : stuck) group->wake_all();
    lock.lock();
    return true;
  }

  // Erases the record of `rank` waiting at the current meeting, if any (mutex_ held).
  void stop_waiting(int rank) {
    if (!waiting_[rank]) return;
    waiting_[rank] = false;
    --waiting_count_;
    waits_->stop_waiting(world_ranks_[rank], thread_);
  }

  // "collective #3 on group {0,1} (mesh axis X), all_gather<float> of 12 elements,"
  std::string where(const CollectiveDescriptor& call, std::uint64_t sequence) const {
    return "collective #" + std::to_string(sequence) + " on " + name_ + ", " + describe(call) + ",";
  }

  // Throws if the group broke, the world is deadlocked or failed (mutex_ held): the check of a
  // collective's start. A deadlock is named before a failure, which is then its report.
  void throw_if_unusable(const CollectiveDescriptor& call, std::uint64_t sequence) const {
    throw_if_broken(call, sequence);
    if (waits_->deadlocked())
      throw comm_error("tpx: " + where(call, sequence) + " aborted: " + waits_->picture());
    throw_if_failed(call, sequence);
  }

  // Throws if the group broke: every rank of the collective that broke it gets the same
  // message, any later call says it was aborted by it. mutex_ held.
  void throw_if_broken(const CollectiveDescriptor& call, std::uint64_t sequence) const {
    if (!broken_) return;
    if (broken_->sequence == sequence && broken_->call == call)
      throw comm_error("tpx: " + broken_->what);
    throw comm_error("tpx: " + where(call, sequence) + " aborted: " + broken_->what);
  }

  // Throws if a rank of the world failed (HostWorld::abort).
  void throw_if_failed(const CollectiveDescriptor& call, std::uint64_t sequence) const {
    if (failure_->happened())
      throw comm_error("tpx: " + where(call, sequence) + " aborted: " + failure_->reason());
  }

  // Breaks the group if a member that has not come to this meeting has returned: it never will.
  // mutex_ held.
  void throw_if_deserted(const CollectiveDescriptor& call, std::uint64_t sequence) {
    const std::vector<int> returned = members_if([&](int r) { return !present_[r] && gone(r); });
    if (returned.empty()) return;
    std::string what = where(call, sequence) + " can never complete: world ranks " +
                       bracketed(members_if([&](int r) { return present_[r]; })) +
                       " joined it but " + bracketed(returned) + " returned without joining it";
    const std::vector<int> coming = members_if([&](int r) { return !present_[r] && !gone(r); });
    if (!coming.empty()) what += " (" + bracketed(coming) + " had not come yet)";
    what +=
        ". Is a collective inside rank-dependent control flow, e.g. "
        "`if (rank.world_rank() == 0)`?";
    broken_ = Breakdown{sequence, call, what};
    throw comm_error("tpx: " + what);
  }

  // Whether group rank r has returned (HostWorld::finish).
  bool gone(int r) const { return returns_->returned(world_ranks_[r]); }

  // The members, in world numbering, whose group rank satisfies `pred`.
  template <class Pred>
  std::vector<int> members_if(Pred pred) const {
    std::vector<int> found;
    for (int r = 0; r < size(); ++r)
      if (pred(r)) found.push_back(world_ranks_[r]);
    return found;
  }

  // Throws, on every rank alike, if the ranks of the group made different calls: the message
  // names the ranks that deviated from the call most of them made, or, when no call has more
  // ranks than every other, says so and lists every call with its ranks.
  void check_same_call(std::span<const Publication> calls, std::uint64_t sequence) const {
    if (std::ranges::all_of(calls, [&](const Publication& p) { return p.call == calls[0].call; }))
      return;
    struct Caller {  // one distinct call and the ranks (world numbering) that made it
      CollectiveDescriptor call;
      std::vector<int> ranks;
    };
    std::vector<Caller> callers;  // in the order of their first caller's group rank
    for (int r = 0; r < size(); ++r) {
      auto same =
          std::ranges::find_if(callers, [&](const Caller& c) { return c.call == calls[r].call; });
      if (same == callers.end()) same = callers.insert(callers.end(), Caller{calls[r].call, {}});
      same->ranks.push_back(world_ranks_[r]);
    }
    const auto most = std::ranges::max_element(
        callers, [](const Caller& a, const Caller& b) { return a.ranks.size() < b.ranks.size(); });
    const bool tie = std::ranges::count_if(callers, [&](const Caller& c) {
                       return c.ranks.size() == most->ranks.size();
                     }) > 1;
    const Caller& reference = tie ? callers.front() : *most;
    // "world rank 2 called barrier", with " with different per-rank counts" where it reads as
    // the reference call.
    const auto called = [&](const Caller& c) {
      // Appended piece by piece: `"..." + std::to_string(...)` trips GCC 12's -Wrestrict at -O3.
      std::string text = c.ranks.size() == 1 ? "world rank " : "world ranks ";
      text += c.ranks.size() == 1 ? std::to_string(c.ranks[0]) : bracketed(c.ranks);
      text += " called ";
      text += describe(c.call);
      if (&c != &reference && describe(c.call) == describe(reference.call))
        text += " with different per-rank counts";
      return text;
    };
    std::string what = "tpx: mismatched collectives on ";
    what += name_;
    what += " at collective #";
    what += std::to_string(sequence);
    what += ": ";
    if (tie) {
      what += "the calls are tied, none made by more ranks than the others: ";
      for (const Caller& c : callers) {
        if (&c != &callers.front()) what += ", ";
        what += called(c);
      }
    } else {
      bool first = true;
      for (const Caller& c : callers) {
        if (&c == &*most) continue;
        if (!first) what += " and ";
        what += called(c);
        first = false;
      }
      what += " where ranks ";
      what += bracketed(most->ranks);
      what += " called ";
      what += describe(most->call);
    }
    throw comm_error(what);
  }

  const std::vector<int> world_ranks_;
  const std::string name_;  // "group {0,2} (mesh axis X)"
  const RankThread thread_;
  const std::chrono::milliseconds timeout_;
  const HostFailure* failure_;
  const HostReturns* returns_;
  HostWaits* waits_;
  std::array<std::vector<Publication>, 2> publications_;  // [sequence % 2][rank]
  std::vector<std::uint64_t> sequences_;  // [rank]: its collectives so far; touched by it only

  // How long an early rank watches for the last one before sleeping (see the top of the file).
  static constexpr std::chrono::microseconds spin_before_sleep{50};

  std::mutex mutex_;  // guards everything below (generation_ is written under it, read anywhere)
  std::condition_variable everyone_arrived_;
  std::atomic<std::uint64_t> generation_{0};
  int arrived_ = 0;
  std::vector<bool> present_;        // [rank]: arrived at the current meeting
  std::vector<bool> waiting_;        // [rank]: recorded in waits_ as sleeping at it
  int waiting_count_ = 0;            // how many are
  std::optional<Breakdown> broken_;  // set once, never cleared
};

}  // namespace tpx::detail

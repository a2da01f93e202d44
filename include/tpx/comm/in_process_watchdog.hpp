// InProcessWatchdog: the watcher of the checked exchanges (comm/exchange_watcher.hpp) of ranks
// that are threads of one process, so that ranks waiting in each other's collectives (rank 0 in
// a collective over Y that rank 1 would join once rank 0 joins one over X: a cycle across
// groups) fail within a fraction of a second with the picture of who waits where, instead of
// each at its timeout. It is what spmd(tpx::cuda_devices, ...) gives its NCCL communicators with
// collectives checked (cuda/spmd_nccl.hpp): their exchanges go over NCCL, which no group can see
// past, but the ranks share this process's memory.
//
// Each rank reports through its own view, of(world rank), as MpiWatchdog's processes report to
// world rank 0, with the same words and the same verdict (comm/wait_picture.hpp); only the
// channel differs: a rank that has waited announce_after (100 ms, or half the timeout if that is
// shorter) writes its word to one board under a mutex, and writes again when its wait ends. Until
// then a wait costs nothing but a comparison, so ranks that keep pace never touch the board.
// Whichever waiting rank finds the board changed since the last judgement judges it under the
// mutex; once the verdict is given it is kept, and every waiting rank throws comm_error with it
// at its next poll, so each rank's failure shows the whole picture. When the timeout passes
// instead, the communicator's message adds what the board last showed (last_heard).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpx/comm/call_record.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/exchange_watcher.hpp"
#include "tpx/comm/wait_picture.hpp"

namespace tpx::detail {

class InProcessWatchdog {
 public:
  using clock = std::chrono::steady_clock;

  // For `ranks` ranks on the groups of `layout`; `hosts` names every world rank's host in
  // messages (or none).
  InProcessWatchdog(int ranks, std::chrono::milliseconds timeout, GroupLayout layout,
                    std::vector<std::string> hosts = {})
      : announce_after_(std::min<clock::duration>(std::chrono::milliseconds(100), timeout / 2)),
        picture_(ranks, std::move(layout), std::move(hosts)) {
    for (int r = 0; r < ranks; ++r) views_.push_back(std::make_unique<RankView>(*this, r));
  }
  InProcessWatchdog(const InProcessWatchdog&) = delete;
  InProcessWatchdog& operator=(const InProcessWatchdog&) = delete;

  // What world rank r reports to; used by that rank's thread alone.
  exchange_watcher& of(int world_rank) { return *views_[static_cast<std::size_t>(world_rank)]; }

 private:
  class RankView final : public exchange_watcher {
   public:
    RankView(InProcessWatchdog& board, int rank)
        : board_(&board), rank_(rank), posted_(board.picture_.layout().ids, 0) {}

    void posted(unsigned group, std::uint64_t sequence) override { posted_[group] = sequence; }

    void waiting(const exchange_wait& where, clock::duration waited) override {
      if (waited < board_->announce_after_) return;
      if (board_->deadlocked_.load(std::memory_order_acquire)) throw comm_error(board_->verdict_);
      if (announced_ && board_->told_.load(std::memory_order_relaxed) ==
                            board_->judged_at_.load(std::memory_order_relaxed))
        return;  // the board is as last judged
      std::lock_guard lock(board_->mutex_);
      if (!announced_) board_->tell(rank_, word_of(posted_, where));
      announced_ = true;
      board_->judge(rank_, waited);
    }

    void done_waiting() override {
      if (!announced_) return;
      std::lock_guard lock(board_->mutex_);
      board_->tell(rank_, word_of(posted_, std::nullopt));
      announced_ = false;
    }

    std::string last_heard() const override {
      std::lock_guard lock(board_->mutex_);
      return board_->picture_.last_heard("This process's watchdog");
    }

   private:
    InProcessWatchdog* board_;
    int rank_;
    std::vector<std::uint64_t> posted_;  // [group id]: exchanges this rank has posted on it
    bool announced_ = false;             // the board shows this rank's current wait
  };

  // Writes rank r's word to the board (mutex_ held).
  void tell(int r, RankWord word) {
    picture_.hear(r, std::move(word));
    told_.fetch_add(1, std::memory_order_relaxed);
  }

  // Judges the board if it changed since the last judgement (mutex_ held); throws comm_error
  // with the verdict, which it keeps for the other ranks.
  void judge(int r, clock::duration waited) {
    if (deadlocked_.load(std::memory_order_relaxed)) throw comm_error(verdict_);
    const std::uint64_t told = told_.load(std::memory_order_relaxed);
    if (told == judged_at_.load(std::memory_order_relaxed)) return;
    judged_at_.store(told, std::memory_order_relaxed);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(waited).count();
    std::optional<std::string> verdict =
        picture_.deadlock(ranks_on_hosts(std::span<const int>(&r, 1), picture_.hosts()), ms);
    if (!verdict) return;
    verdict_ = std::move(*verdict);
    deadlocked_.store(true, std::memory_order_release);
    throw comm_error(verdict_);
  }

  clock::duration announce_after_;
  mutable std::mutex mutex_;
  WaitPicture picture_;                      // every rank's latest word (mutex_)
  std::atomic<std::uint64_t> told_{0};       // words written (under mutex_)
  std::atomic<std::uint64_t> judged_at_{0};  // told_ at the last judgement (under mutex_)
  std::atomic<bool> deadlocked_{false};      // the verdict is given
  std::string verdict_;                      // written once, before deadlocked_
  std::vector<std::unique_ptr<RankView>> views_;
};

}  // namespace tpx::detail

// HeartbeatWatchdog: the heartbeat protocol of the watchers whose ranks are processes that
// report to world rank 0 over a channel (MpiWatchdog over MPI, comm/mpi_watchdog.hpp;
// TcpWatchdog over the TCP rendezvous's connections, comm/tcp_watchdog.hpp), written once; each
// of them adds only its channel.
//
// The protocol (comm/exchange_watcher.hpp says when the calls come): a rank that has waited
// heartbeat_after tells world rank 0 where it waits, once per wait, as a word of the picture
// (comm/wait_picture.hpp: the group and number of the exchange and the call, or that it has
// returned, with how many exchanges it has posted on each of its groups), and that it runs again
// when the wait ends. Nothing is sent or read while the ranks keep pace. Rank 0 tells itself at
// once; the others keep only the newest word not yet sent (the channel sends it when it can,
// never blocking the rank). Rank 0, while it has itself waited heartbeat_after, reads the words
// that arrived and judges the picture at most every 200 ms once words changed: when no exchange
// can ever complete, it hands the verdict to the channel (which may pass it on to the others)
// and throws comm_error with it. The others, while they wait, read what the channel brought from
// rank 0 (a channel may bring the verdict and throw it).
//
// The channel's hooks: send_untold() (not rank 0: pass take_unsent() on when the channel is
// free), hear_words() (rank 0: heard(rank, word) for every word arrived), and, where the channel
// carries it, deliver_verdict() on rank 0 and hear_verdict() on the others.
#pragma once

#include <chrono>
#include <cstdint>
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

class HeartbeatWatchdog : public exchange_watcher {
 public:
  using clock = std::chrono::steady_clock;

  void posted(unsigned group, std::uint64_t sequence) override { posted_[group] = sequence; }

  // Once the rank has waited heartbeat_after: tells rank 0 where it waits, once; then, on rank 0,
  // reads the others' words and judges, elsewhere sends what is still untold and reads what rank
  // 0 sent.
  void waiting(const exchange_wait& where, clock::duration waited) override {
    if (waited < heartbeat_after_) return;
    if (!announced_) tell_rank_0(word_of(posted_, where));
    announced_ = true;
    if (rank_ == 0) {
      hear_words();
      judge(waited);
    } else {
      send_untold();
      hear_verdict();
    }
  }
  void done_waiting() override {
    if (announced_) tell_rank_0(word_of(posted_, std::nullopt));
    announced_ = false;
  }

  // "World rank 0 last heard: ..." on rank 0, for a timeout's message; empty elsewhere.
  std::string last_heard() const override {
    return rank_ == 0 ? picture_.last_heard("World rank 0") : "";
  }

 protected:
  // World rank `rank` of `world_size`, on the groups of `layout`; `hosts` names every world
  // rank's host in messages (or none). The picture gets a copy of hosts: a move could empty it
  // before its size is read (arguments are evaluated in no set order).
  HeartbeatWatchdog(int rank, int world_size, clock::duration heartbeat_after, GroupLayout layout,
                    const std::vector<std::string>& hosts)
      : rank_(rank),
        heartbeat_after_(heartbeat_after),
        posted_(layout.ids, 0),
        picture_(world_size, std::move(layout), hosts) {}

  // The channel (see the top of the file).
  virtual void send_untold() = 0;
  virtual void hear_words() = 0;
  virtual void deliver_verdict(const std::string&) {}
  virtual void hear_verdict() {}

  int rank() const noexcept { return rank_; }
  const WaitPicture& picture() const noexcept { return picture_; }
  // "world rank 2 (host node1)", or "world rank 2" without hosts.
  std::string me() const {
    return ranks_on_hosts(std::span<const int>(&rank_, 1), picture_.hosts());
  }
  // The newest word rank 0 has not been sent, taken by the channel to send.
  std::optional<RankWord> take_unsent() { return std::exchange(unsent_, std::nullopt); }
  // Rank 0: `word` arrived from world rank r.
  void heard(int r, RankWord word) {
    picture_.hear(r, std::move(word));
    heard_new_ = true;
  }
  // The wait ended without done_waiting() (it timed out: the rank fails, its word stays).
  void forget_wait() { announced_ = false; }
  // Nothing more is to be told (the rank has finished).
  void forget_unsent() { unsent_.reset(); }

 private:
  static constexpr auto judge_every = std::chrono::milliseconds(200);

  // Makes `word` the one rank 0 should hear next (rank 0's own joins the picture at once).
  void tell_rank_0(RankWord word) {
    if (rank_ == 0) {
      heard(0, std::move(word));
      return;
    }
    unsent_ = std::move(word);
    send_untold();
  }

  // Rank 0, after waiting `waited`: when no rank can go on, hands the verdict to the channel and
  // throws it.
  void judge(clock::duration waited) {
    const auto now = clock::now();
    if (!heard_new_ || now - judged_ < judge_every) return;
    heard_new_ = false;
    judged_ = now;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(waited).count();
    std::optional<std::string> verdict = picture_.deadlock(me(), ms);
    if (!verdict) return;
    deliver_verdict(*verdict);
    throw comm_error(std::move(*verdict));
  }

  int rank_;
  clock::duration heartbeat_after_;
  std::vector<std::uint64_t> posted_;  // [group id]: exchanges this rank has posted on it
  WaitPicture picture_;                // rank 0: every rank's latest word
  bool announced_ = false;             // rank 0 was told of the current wait
  std::optional<RankWord> unsent_;     // the newest word rank 0 has not been sent yet
  bool heard_new_ = false;             // rank 0: words arrived since the last judgement
  clock::time_point judged_{};         // rank 0: the last judgement
};

}  // namespace tpx::detail

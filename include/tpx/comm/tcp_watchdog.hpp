// TcpWatchdog: the watcher of the checked exchanges (comm/exchange_watcher.hpp) of processes
// started by torchrun or srun without MPI, whose only channel besides NCCL is the TCP rendezvous
// that handed them NCCL's id (launch/tcp_rendezvous.hpp). Its connections stay open
// (tcp_rendezvous_linked) and carry the heartbeat MpiWatchdog (comm/mpi_watchdog.hpp) carries
// over MPI, so that ranks waiting in each other's collectives (a cycle across groups) fail about
// a second after the cycle forms, with the picture of who waits where, instead of each at its
// timeout.
//
// The same words and the same verdict (comm/wait_picture.hpp): a rank that has waited
// heartbeat_after (1 s, or half the timeout if that is shorter) tells world rank 0 where it
// waits, and that it runs again when the wait ends; rank 0 reads the words while it has itself
// waited that long, and judges at most every 200 ms once words changed. Nothing is sent or read
// while the ranks keep pace. A word goes as wire_words() 64-bit integers in this machine's byte
// order (every rank runs the same build: the rendezvous compared their fingerprints); a rank
// sends without ever blocking, the rest of a word the socket did not take first, and keeps only
// the newest word it could not send yet, so a rank 0 that does not read (it computes) costs the
// others nothing. Once rank 0 has the verdict it sends the sentence to every rank (a 4-byte
// little-endian length, then the text) and throws comm_error with it; a rank that reads it while
// it waits throws the same, so every process's failure shows the picture even when the launcher
// does not end the job (srun without --kill-on-bad-exit). A connection that closes is not an
// error here: a rank that has finished closes it, and a rank that died is the launcher's or the
// timeout's to report.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpx/comm/call_record.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/exchange_watcher.hpp"
#include "tpx/comm/wait_picture.hpp"
#include "tpx/launch/tcp_rendezvous.hpp"

namespace tpx::detail {

class TcpWatchdog final : public exchange_watcher {
 public:
  using clock = std::chrono::steady_clock;

  // World rank `rank` of `world_size`, on the groups of `layout`, over the connections its
  // rendezvous left (`links`: to every other rank on rank 0, to rank 0 elsewhere).
  // `heartbeat_after` replaces the default (see the top of the file), for tests.
  TcpWatchdog(int rank, int world_size, std::chrono::milliseconds timeout, GroupLayout layout,
              rendezvous_links links, std::optional<clock::duration> heartbeat_after = {})
      : rank_(rank),
        heartbeat_after_(heartbeat_after.value_or(
            std::min<clock::duration>(std::chrono::seconds(1), timeout / 2))),
        word_bytes_(wire_words(layout.ids) * sizeof(std::uint64_t)),
        posted_(layout.ids, 0),
        picture_(world_size, std::move(layout), {}),
        links_(std::move(links)),
        inbox_(links_.ranks.size()) {}

  void posted(unsigned group, std::uint64_t sequence) override { posted_[group] = sequence; }

  // Once the rank has waited heartbeat_after: tells rank 0 where it waits, once; then, on rank 0,
  // reads the others' words and judges, elsewhere sends what is still untold and reads rank 0's
  // verdict, if it came.
  void waiting(const exchange_wait& where, clock::duration waited) override {
    if (waited < heartbeat_after_) return;
    if (!announced_) tell_rank_0(word_of(posted_, where));
    announced_ = true;
    if (rank_ == 0) {
      hear();
      judge(waited);
    } else {
      send_what_is_untold();
      read_verdict();
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

 private:
  static constexpr auto judge_every = std::chrono::milliseconds(200);

  // Makes `word` the one rank 0 should hear next (rank 0's own joins the picture at once).
  void tell_rank_0(const RankWord& word) {
    if (rank_ == 0) {
      picture_.hear(0, word);
      heard_new_ = true;
      return;
    }
    unsent_ = word;
    send_what_is_untold();
  }

  // Sends, without blocking, the rest of the word in flight, then the newest untold word.
  void send_what_is_untold() {
    const int fd = links_.rank0.get();
    while (fd >= 0 && !rank0_deaf_) {
      if (outgoing_.empty()) {
        if (!unsent_) return;
        const std::vector<std::uint64_t> wire = wire_of(*unsent_);
        unsent_.reset();
        const auto bytes = std::as_bytes(std::span(wire));
        outgoing_.assign(bytes.begin(), bytes.end());
      }
      const ssize_t sent =
          ::send(fd, outgoing_.data(), outgoing_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent > 0) {
        outgoing_.erase(outgoing_.begin(), outgoing_.begin() + sent);
      } else if (sent < 0 && errno == EINTR) {
        continue;
      } else if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      } else {
        rank0_deaf_ = true;  // rank 0 has finished or died: nobody to tell (see the top)
      }
    }
  }

  // Reads what has arrived on `fd` into `inbox` without blocking; false once the peer closed.
  static bool receive_available(int fd, std::vector<std::byte>& inbox) {
    std::byte chunk[4096];
    for (;;) {
      const ssize_t got = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
      if (got > 0) {
        inbox.insert(inbox.end(), chunk, chunk + got);
      } else if (got < 0 && errno == EINTR) {
        continue;
      } else {
        return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      }
    }
  }

  // Rank 0: reads every word that has arrived.
  void hear() {
    for (std::size_t r = 1; r < links_.ranks.size(); ++r) {
      const int fd = links_.ranks[r].get();
      if (fd < 0) continue;
      std::vector<std::byte>& inbox = inbox_[r];
      const bool open = receive_available(fd, inbox);
      std::size_t used = 0;
      for (; inbox.size() - used >= word_bytes_; used += word_bytes_) {
        std::vector<std::uint64_t> wire(word_bytes_ / sizeof(std::uint64_t));
        std::memcpy(wire.data(), inbox.data() + used, word_bytes_);
        picture_.hear(static_cast<int>(r), word_from_wire(wire));
        heard_new_ = true;
      }
      inbox.erase(inbox.begin(), inbox.begin() + static_cast<std::ptrdiff_t>(used));
      if (!open) links_.ranks[r] = rendezvous::socket_fd();
    }
  }

  // Rank 0, after waiting `waited`: when no rank can go on, tells every rank and throws.
  void judge(clock::duration waited) {
    const auto now = clock::now();
    if (!heard_new_ || now - judged_ < judge_every) return;
    heard_new_ = false;
    judged_ = now;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(waited).count();
    std::optional<std::string> verdict = picture_.deadlock("world rank 0", ms);
    if (!verdict) return;
    std::vector<std::byte> message(4 + verdict->size());
    for (std::size_t i = 0; i < 4; ++i)
      message[i] = static_cast<std::byte>(verdict->size() >> (8 * i));
    std::memcpy(message.data() + 4, verdict->data(), verdict->size());
    const auto deadline = clock::now() + std::chrono::seconds(1);
    for (const rendezvous::socket_fd& peer : links_.ranks) {
      if (!peer.valid()) continue;
      rendezvous::send_all(peer.get(), message, deadline);
      ::shutdown(peer.get(), SHUT_WR);  // the verdict, then the end: before any close
    }
    throw comm_error(std::move(*verdict));
  }

  // Elsewhere: throws comm_error with rank 0's verdict once all of it has arrived.
  void read_verdict() {
    const int fd = links_.rank0.get();
    if (fd < 0 || rank0_closed_) return;
    if (!receive_available(fd, verdict_inbox_)) rank0_closed_ = true;
    if (verdict_inbox_.size() < 4) return;
    std::uint32_t length = 0;
    for (int i = 0; i < 4; ++i)
      length |= std::to_integer<std::uint32_t>(verdict_inbox_[i]) << (8 * i);
    if (verdict_inbox_.size() < 4 + std::size_t{length}) return;
    throw comm_error(rendezvous::text_of(std::span(verdict_inbox_).subspan(4, length)));
  }

  int rank_;
  clock::duration heartbeat_after_;
  std::size_t word_bytes_;
  std::vector<std::uint64_t> posted_;  // [group id]: exchanges this rank has posted on it
  WaitPicture picture_;                // rank 0: every rank's latest word
  rendezvous_links links_;
  bool announced_ = false;                     // rank 0 was told of the current wait
  std::optional<RankWord> unsent_;             // the newest word rank 0 has not been sent yet
  std::vector<std::byte> outgoing_;            // the rest of the word being sent
  bool rank0_deaf_ = false;                    // sending to rank 0 failed
  bool rank0_closed_ = false;                  // rank 0 will send nothing more
  std::vector<std::byte> verdict_inbox_;       // what rank 0 sent (its verdict)
  std::vector<std::vector<std::byte>> inbox_;  // rank 0: [rank] bytes of a word not yet whole
  bool heard_new_ = false;                     // rank 0: words arrived since the last judgement
  clock::time_point judged_{};                 // rank 0: the last judgement
};

}  // namespace tpx::detail

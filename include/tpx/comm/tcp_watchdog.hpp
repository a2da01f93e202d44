// TcpWatchdog: the watcher of the checked exchanges (comm/exchange_watcher.hpp) of processes
// started by torchrun or srun without MPI, whose only channel besides NCCL is the TCP rendezvous
// that handed them NCCL's id (launch/tcp_rendezvous.hpp). Its connections stay open
// (tcp_rendezvous_linked) and carry the heartbeat MpiWatchdog (comm/mpi_watchdog.hpp) carries
// over MPI, so that ranks waiting in each other's collectives (a cycle across groups) fail about
// a second after the cycle forms, with the picture of who waits where, instead of each at its
// timeout.
//
// The protocol is HeartbeatWatchdog's (comm/heartbeat_watchdog.hpp), with heartbeat_after 1 s (or
// half the timeout if that is shorter); this file is its channel. A word goes as wire_words()
// 64-bit integers in this machine's byte order (every rank runs the same build: the rendezvous
// compared their fingerprints); a rank sends without ever blocking, the rest of a word the socket
// did not take first, and keeps only the newest word it could not send yet, so a rank 0 that
// does not read (it computes) costs the others nothing. Once rank 0 has the verdict it sends the
// sentence to every rank (a 4-byte little-endian length, then the text) and throws comm_error
// with it; a rank that reads it while it waits throws the same, so every process's failure shows
// the picture even when the launcher does not end the job (srun without --kill-on-bad-exit). A
// connection that closes is not an error here: a rank that has finished closes it, and a rank
// that died is the launcher's or the timeout's to report.
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
#include "tpx/comm/heartbeat_watchdog.hpp"
#include "tpx/comm/wait_picture.hpp"
#include "tpx/launch/tcp_rendezvous.hpp"

namespace tpx::detail {

class TcpWatchdog final : public HeartbeatWatchdog {
 public:
  // World rank `rank` of `world_size`, on the groups of `layout`, over the connections its
  // rendezvous left (`links`: to every other rank on rank 0, to rank 0 elsewhere).
  // `heartbeat_after` replaces the default (see the top of the file), for tests.
  TcpWatchdog(int rank, int world_size, std::chrono::milliseconds timeout, GroupLayout layout,
              rendezvous_links links, std::optional<clock::duration> heartbeat_after = {})
      : HeartbeatWatchdog(rank, world_size,
                          heartbeat_after.value_or(
                              std::min<clock::duration>(std::chrono::seconds(1), timeout / 2)),
                          std::move(layout), {}),
        word_bytes_(wire_words(picture().layout().ids) * sizeof(std::uint64_t)),
        links_(std::move(links)),
        inbox_(links_.ranks.size()) {}

 private:
  // Sends, without blocking, the rest of the word in flight, then the newest untold word.
  void send_untold() override {
    const int fd = links_.rank0.get();
    while (fd >= 0 && !rank0_deaf_) {
      if (outgoing_.empty()) {
        const std::optional<RankWord> word = take_unsent();
        if (!word) return;
        const std::vector<std::uint64_t> wire = wire_of(*word);
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
  void hear_words() override {
    for (std::size_t r = 1; r < links_.ranks.size(); ++r) {
      const int fd = links_.ranks[r].get();
      if (fd < 0) continue;
      std::vector<std::byte>& inbox = inbox_[r];
      const bool open = receive_available(fd, inbox);
      std::size_t used = 0;
      for (; inbox.size() - used >= word_bytes_; used += word_bytes_) {
        std::vector<std::uint64_t> wire(word_bytes_ / sizeof(std::uint64_t));
        std::memcpy(wire.data(), inbox.data() + used, word_bytes_);
        heard(static_cast<int>(r), word_from_wire(wire));
      }
      inbox.erase(inbox.begin(), inbox.begin() + static_cast<std::ptrdiff_t>(used));
      if (!open) links_.ranks[r] = rendezvous::socket_fd();
    }
  }

  // Rank 0, once it has the verdict: sends it to every rank, then the end of its messages.
  void deliver_verdict(const std::string& verdict) override {
    std::vector<std::byte> message(4 + verdict.size());
    for (std::size_t i = 0; i < 4; ++i)
      message[i] = static_cast<std::byte>(verdict.size() >> (8 * i));
    std::memcpy(message.data() + 4, verdict.data(), verdict.size());
    const auto deadline = clock::now() + std::chrono::seconds(1);
    for (const rendezvous::socket_fd& peer : links_.ranks) {
      if (!peer.valid()) continue;
      rendezvous::send_all(peer.get(), message, deadline);
      ::shutdown(peer.get(), SHUT_WR);  // the verdict, then the end: before any close
    }
  }

  // Elsewhere: throws comm_error with rank 0's verdict once all of it has arrived.
  void hear_verdict() override {
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

  std::size_t word_bytes_;
  rendezvous_links links_;
  std::vector<std::byte> outgoing_;            // the rest of the word being sent
  bool rank0_deaf_ = false;                    // sending to rank 0 failed
  bool rank0_closed_ = false;                  // rank 0 will send nothing more
  std::vector<std::byte> verdict_inbox_;       // what rank 0 sent (its verdict)
  std::vector<std::vector<std::byte>> inbox_;  // rank 0: [rank] bytes of a word not yet whole
};

}  // namespace tpx::detail

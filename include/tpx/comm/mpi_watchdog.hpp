// MpiWatchdog: how a rank of the MPI backend waits for its peers, how long, and what it tells the
// others while it waits, so that a job whose ranks can no longer meet ends with a message instead
// of hanging.
//
// Every wait for peers goes through wait(): the signature exchange before each collective
// (mpi_communicator.hpp) and a returning rank's last exchanges (spmd_mpi.hpp); the NCCL
// communicator's checked exchanges under mpirun report theirs through the exchange_watcher
// interface (exchange_watcher.hpp), so the heartbeat below judges them alike. wait() polls the
// exchange's nonblocking requests until they complete: spinning for the first millisecond, as
// MPI's own blocking calls do (yielding the core at every poll cost 5-50 us per collective on a
// loaded machine, more than the exchange itself), then yielding between polls up to 50 ms, then
// sleeping 1 ms between polls. When spmd_options::timeout passes first it returns false and the
// caller throws comm_error naming the collective and the group.
//
// The heartbeat makes the usual cause of a hang, ranks waiting in different collectives (one in
// a collective of group Y, its peer in one of group X: a cycle), fail within about a second
// instead of at the timeout. Its protocol is HeartbeatWatchdog's (comm/heartbeat_watchdog.hpp),
// with heartbeat_after 1 s (or half the timeout if that is shorter); this file is its channel.
// Words go by MPI_Issend on a duplicate of MPI_COMM_WORLD kept for this, one at most in flight
// from each rank (a newer word waits until rank 0 has received the older, and replaces any not
// yet sent), so that rank 0 never holds more words than there are ranks. Rank 0 reads words only
// while it has itself waited heartbeat_after (probing for them at every collective cost more
// than the collective) and at the end. In a deadlock every rank waits for good, so rank 0 reads
// every word and the picture is complete about a second after it forms, when rank 0 throws
// comm_error with the verdict. When the timeout passes
// instead, rank 0's message adds what it last heard: which ranks wait where and which are in no
// collective (busy, stuck or dead).
//
// finish(), after every exchange of the SPMD function has completed, makes sure that the last
// word sent to rank 0 has been received (then an MPI_Ibarrier on the heartbeat's communicator,
// which rank 0 polls while still reading words), so that no message is left in flight when the
// communicator is freed and MPI finalized.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tpx/comm/call_record.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/exchange_watcher.hpp"
#include "tpx/comm/heartbeat_watchdog.hpp"
#include "tpx/comm/mpi_errors.hpp"
#include "tpx/comm/wait_picture.hpp"

namespace tpx::detail {

class MpiWatchdog final : public HeartbeatWatchdog {
 public:
  using Waiting = exchange_wait;

  // Duplicates MPI_COMM_WORLD for the heartbeat (collective: every process constructs one).
  MpiWatchdog(std::vector<std::string> hosts, std::chrono::milliseconds timeout, GroupLayout layout)
      : HeartbeatWatchdog(world_rank(), static_cast<int>(hosts.size()),
                          std::min<clock::duration>(std::chrono::seconds(1), timeout / 2),
                          std::move(layout), hosts),
        timeout_(timeout) {
    check(MPI_Comm_dup(MPI_COMM_WORLD, &heartbeat_), "MPI_Comm_dup", "the heartbeat's start");
    MPI_Comm_set_errhandler(heartbeat_, MPI_ERRORS_RETURN);
  }
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;
  ~MpiWatchdog() override { MPI_Comm_free(&heartbeat_); }

  std::span<const std::string> hosts() const noexcept { return picture().hosts(); }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  using HeartbeatWatchdog::me;

  // Polls `requests` until all have completed, calling done(i) as request i completes (it may
  // throw); false if the timeout passes first. Throws comm_error on rank 0 when the heartbeat
  // shows that no rank can go on (see the top of the file).
  template <class Done>
  bool wait(std::span<MPI_Request> requests, const Waiting& where, Done&& done) {
    if (requests.empty()) return true;
    completed_.resize(requests.size());
    std::size_t left = requests.size();
    const bool met = poll(timeout_, [&](clock::duration waited) {
      int count = 0;
      check(MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &count,
                         completed_.data(), MPI_STATUSES_IGNORE),
            "MPI_Testsome", "a signature exchange");
      for (int i = 0; i < count; ++i, --left) done(static_cast<std::size_t>(completed_[i]));
      if (left == 0) return true;
      waiting(where, waited);
      return false;
    });
    if (met)
      done_waiting();
    else
      forget_wait();  // a rank whose wait timed out fails: its word stays
    return met;
  }

  // After this rank's last exchange: waits until every word sent to rank 0 has been received
  // (see the top of the file).
  void finish() {
    forget_unsent();  // what this rank did last matters no more
    const auto words_received = [&] {
      if (rank() == 0) hear_words();
      int received = 0;
      check(MPI_Test(&in_flight_, &received, MPI_STATUS_IGNORE), "MPI_Test", "the heartbeat");
      return received != 0;
    };
    bool ended = poll(timeout_, [&](clock::duration) { return words_received(); });
    if (ended) {
      MPI_Request everyone = MPI_REQUEST_NULL;
      check(MPI_Ibarrier(heartbeat_, &everyone), "MPI_Ibarrier", "the heartbeat's end");
      ended = poll(timeout_, [&](clock::duration) {
        words_received();
        int met = 0;
        check(MPI_Test(&everyone, &met, MPI_STATUS_IGNORE), "MPI_Test", "the heartbeat's end");
        return met != 0;
      });
    }
    if (!ended) {
      throw comm_error("tpx: " + me() + " returned, but the heartbeat did not end within " +
                       std::to_string(timeout_.count()) + " ms: some rank did not return");
    }
  }

 private:
  // A word (wait_picture.hpp) goes as words_per_word() MPI_UINT64_T (wire_of).
  static constexpr int word_tag = 1;
  static constexpr auto spin_for = std::chrono::milliseconds(1);
  static constexpr auto yield_for = std::chrono::milliseconds(50);
  static constexpr auto pause_after_yield = std::chrono::milliseconds(1);

  static int world_rank() {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
  }

  int words_per_word() const { return static_cast<int>(wire_words(picture().layout().ids)); }

  // Calls ready(time waited) until it returns true (the pause between calls as at the top of the
  // file); false if `limit` passes first.
  template <class Ready>
  static bool poll(std::chrono::milliseconds limit, Ready&& ready) {
    const auto start = clock::now();
    for (;;) {
      const auto waited = clock::now() - start;
      if (ready(waited)) return true;
      if (waited >= limit) return false;
      if (waited >= yield_for)
        std::this_thread::sleep_for(pause_after_yield);
      else if (waited >= spin_for)
        std::this_thread::yield();
    }
  }

  // Sends the newest untold word once rank 0 has received the previous one: one word at most is
  // in flight from each rank, so the words waiting at rank 0 are never more than the ranks.
  void send_untold() override {
    int received = 0;
    check(MPI_Test(&in_flight_, &received, MPI_STATUS_IGNORE), "MPI_Test", "the heartbeat");
    if (!received) return;
    const std::optional<RankWord> word = take_unsent();
    if (!word) return;
    in_flight_wire_ = wire_of(*word);
    check(MPI_Issend(in_flight_wire_.data(), words_per_word(), MPI_UINT64_T, 0, word_tag,
                     heartbeat_, &in_flight_),
          "MPI_Issend", "the heartbeat");
  }

  // Rank 0: reads every word that has arrived.
  void hear_words() override {
    for (;;) {
      int arrived = 0;
      MPI_Status status;
      check(MPI_Iprobe(MPI_ANY_SOURCE, word_tag, heartbeat_, &arrived, &status), "MPI_Iprobe",
            "the heartbeat");
      if (!arrived) return;
      std::vector<std::uint64_t> wire(static_cast<std::size_t>(words_per_word()));
      check(MPI_Recv(wire.data(), words_per_word(), MPI_UINT64_T, status.MPI_SOURCE, word_tag,
                     heartbeat_, MPI_STATUS_IGNORE),
            "MPI_Recv", "the heartbeat");
      heard(status.MPI_SOURCE, word_from_wire(wire));
    }
  }

  // check_mpi's comm_error, "<call> failed in <doing> on world rank r (host h): ...", built only on
  // failure (the polls run it often).
  void check(int code, const char* call, const char* doing) const {
    if (code != MPI_SUCCESS) check_mpi(code, call, std::string(doing) + " on " + me());
  }

  std::chrono::milliseconds timeout_;
  MPI_Comm heartbeat_ = MPI_COMM_NULL;
  std::vector<int> completed_;                 // wait()'s MPI_Testsome indices, kept between calls
  std::vector<std::uint64_t> in_flight_wire_;  // the word on its way to rank 0 (MPI reads it)
  MPI_Request in_flight_ = MPI_REQUEST_NULL;   // its synchronous send
};

}  // namespace tpx::detail

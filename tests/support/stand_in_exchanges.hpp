// Stand-in exchanges for the tests of the exchange watchers (tests/unit/in_process_watchdog_test
// and tcp_watchdog_test), and the scenarios both run, with the pictures they must give (written
// out from each scenario's program): four ranks on a 2x2 mesh (groups of X {0,2} {1,3}, of Y {0,1}
// {2,3}, of both {0,1,2,3}), each a thread, driving its watcher through the exchange_watcher
// interface as NcclCommunicator does. Exchange #n of a group completes once every member has posted
// #n, as the NCCL all-gather of the records does; a rank that returns posts its "returned" exchange
// on every group and waits for them all, as nccl_mesh::return_from_groups does. A wait longer than
// the timeout throws runtime_error "timed out." with what the watcher last heard.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <tpx/comm/exchange_watcher.hpp>
#include <tpx/tpx.hpp>
#include <vector>

namespace stand_in {

TPX_MESH_AXES(X, Y);
using MeshT = tpx::Mesh<X, Y>;
using Clock = std::chrono::steady_clock;

constexpr unsigned x = 1, y = 2, xy = 3;  // the groups' ids: their axis sets' masks
constexpr int ranks = 4;

inline MeshT mesh() { return MeshT{2, 2}; }

inline tpx::detail::CallRecord all_reduce_8() {
  return tpx::detail::record_of(
      tpx::detail::collective_call<float>(tpx::detail::CollectiveOp::all_reduce, 8, {}));
}

// The exchanges of one run: how many each rank has posted on each group.
class Exchanges {
 public:
  explicit Exchanges(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  // Rank r reports to `watcher` from now on (set by rank r's thread before its first exchange).
  void watch(int r, tpx::detail::exchange_watcher& watcher) { watchers_[index(r)] = &watcher; }

  // Rank r's next exchange on group `mask`: returns once every member has posted it.
  void exchange(int r, unsigned mask) {
    const std::uint64_t sequence = post(r, mask);
    await(r, {mask, sequence, all_reduce_8()}, [&] { return complete(r, mask, sequence); });
  }

  // Rank r has returned: posts its "returned" exchange on every group and waits for them all.
  void return_from_groups(int r) {
    std::array<std::uint64_t, 4> sequence{};
    for (const unsigned mask : {x, y, xy}) sequence[mask] = post(r, mask);
    await(r, {}, [&] {
      return complete(r, x, sequence[x]) && complete(r, y, sequence[y]) &&
             complete(r, xy, sequence[xy]);
    });
  }

 private:
  static std::size_t index(int r) { return static_cast<std::size_t>(r); }

  std::uint64_t post(int r, unsigned mask) {
    const std::uint64_t sequence =
        posted_[mask][index(r)].fetch_add(1, std::memory_order_release) + 1;
    watchers_[index(r)]->posted(mask, sequence);
    return sequence;
  }
  bool complete(int r, unsigned mask, std::uint64_t sequence) const {
    for (int m = 0; m < ranks; ++m)
      if (tpx::detail::coords_off_axes(mesh_, m, mask) ==
              tpx::detail::coords_off_axes(mesh_, r, mask) &&
          posted_[mask][index(m)].load(std::memory_order_acquire) < sequence)
        return false;
    return true;
  }
  template <class Done>
  void await(int r, const tpx::detail::exchange_wait& where, Done&& done) {
    tpx::detail::exchange_watcher& watcher = *watchers_[index(r)];
    const auto start = Clock::now();
    while (!done()) {
      const auto waited = Clock::now() - start;
      if (waited > timeout_) throw std::runtime_error("timed out." + watcher.last_heard());
      watcher.waiting(where, waited);
      std::this_thread::yield();
    }
    watcher.done_waiting();
  }

  MeshT mesh_ = mesh();
  std::chrono::milliseconds timeout_;
  std::array<tpx::detail::exchange_watcher*, ranks> watchers_{};
  std::array<std::array<std::atomic<std::uint64_t>, ranks>, 4> posted_{};  // [mask][rank]
};

// What each rank threw ("" if it finished), and how long the run took.
struct Outcome {
  std::array<std::string, ranks> thrown;
  Clock::duration took{};
};

// Runs rank(r) on a thread per rank.
inline Outcome run(const std::function<void(int)>& rank) {
  Outcome outcome;
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        rank(r);
      } catch (const std::exception& e) {
        outcome.thrown[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  outcome.took = Clock::now() - start;
  return outcome;
}

// The scenarios, each one rank's program (its return from the groups not included).

// Rank 0 calls Y's exchange, then the world's; the others the world's, then Y's.
inline void cycle(Exchanges& s, int r) {
  if (r == 0) s.exchange(r, y);
  s.exchange(r, xy);
  if (r != 0) s.exchange(r, y);
}
// `on(r)` names rank r as the watcher does: "world rank 1" or "world rank 1 (host n1)".
inline std::string cycle_picture(const std::function<std::string(int)>& on) {
  return "world rank 0 waits in collective #1 on group {0,1} (mesh axis Y), all_reduce<float> of "
         "8 elements, which " +
         on(1) +
         " has not called; world ranks {1,2,3} wait in collective #1 on group {0,1,2,3} (mesh "
         "axes X, Y), all_reduce<float> of 8 elements, which " +
         on(0) + " has not called";
}

// Rank 0 waits in X's exchange for rank 2, rank 1 in Y's for rank 0, rank 2 in the world's for
// ranks 0 and 1, and rank 3 returns: its "returned" exchange on X waits for rank 1.
inline void cycle_through_a_return(Exchanges& s, int r) {
  if (r == 0) s.exchange(r, x);
  if (r == 1) s.exchange(r, y);
  if (r == 2) s.exchange(r, xy);
}
// `on(r)` as for cycle_picture; `on_both`: ranks 0 and 1, "world ranks 0, 1" or with hosts.
inline std::string cycle_through_a_return_picture(const std::function<std::string(int)>& on,
                                                  const std::string& on_both) {
  return "world rank 0 waits in collective #1 on group {0,2} (mesh axis X), all_reduce<float> of "
         "8 elements, which " +
         on(2) +
         " has not called; world rank 1 waits in collective #1 on group {0,1} (mesh axis Y), "
         "all_reduce<float> of 8 elements, which " +
         on(0) +
         " has not called; world rank 2 waits in collective #1 on group {0,1,2,3} (mesh axes X, "
         "Y), all_reduce<float> of 8 elements, which " +
         on_both + " have not called; " + on(3) + " returned";
}

// A correct program whose ranks arrive `gap` apart: the world's exchange, Y's, then X's.
inline void late_arrivals(Exchanges& s, int r, std::chrono::milliseconds gap) {
  std::this_thread::sleep_for(gap * r);
  s.exchange(r, xy);
  std::this_thread::sleep_for(gap * (3 - r));
  s.exchange(r, y);
  if (r == 2) std::this_thread::sleep_for(gap);
  s.exchange(r, x);
  if (r == 1) std::this_thread::sleep_for(gap);
}

// A correct program of `count` exchanges on X, Y and the world in turn, each after a random pause
// of up to 300 us, or, one time in 30, of `long_pause`.
inline void random_arrivals(Exchanges& s, int r, int count, std::chrono::milliseconds long_pause) {
  std::mt19937 random(static_cast<unsigned>(r) + 7u);
  std::uniform_int_distribution<int> pause_us(0, 300), one_in_30(0, 29);
  for (int i = 0; i < count; ++i) {
    const bool long_one = one_in_30(random) == 0;
    std::this_thread::sleep_for(long_one ? std::chrono::microseconds(long_pause)
                                         : std::chrono::microseconds(pause_us(random)));
    s.exchange(r, std::array{x, y, xy}[static_cast<std::size_t>(i % 3)]);
  }
}

// The correct programs both watchers' tests run, which no watcher may take for a deadlock. Their
// waits outlast the 100 ms after which the tests' watchers hear of a wait (TcpWatchdog's
// heartbeat as the test sets it, InProcessWatchdog's announcement), so that words are told and
// judged often: ranks arriving 200 ms apart, and 150 exchanges per rank in random arrival orders,
// one pause in 30 of 120 ms.
struct correct_program {
  const char* name;
  std::function<void(Exchanges&, int)> program;
};
inline const std::vector<correct_program> correct_programs = {
    {"ranks arriving 200 ms apart",
     [](Exchanges& s, int r) { late_arrivals(s, r, std::chrono::milliseconds(200)); }},
    {"150 exchanges per rank in random arrival orders",
     [](Exchanges& s, int r) { random_arrivals(s, r, 150, std::chrono::milliseconds(120)); }},
};

// Rank 1 computes for `busy`, then gives up, while the others wait in the world's exchange.
inline void stuck_outside(Exchanges& s, int r, std::chrono::milliseconds busy) {
  if (r == 1) {
    std::this_thread::sleep_for(busy);
    throw std::runtime_error("rank 1 gave up");
  }
  s.exchange(r, xy);
}
// What the waiting ranks' timeout says, after "timed out. <heard_by> last heard: ".
inline const std::string stuck_outside_heard =
    "world rank 1 not waiting in any collective; world ranks {0,2,3} wait in collective #1 on "
    "group {0,1,2,3} (mesh axes X, Y), all_reduce<float> of 8 elements.";

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline const std::string deadlocked =
    "tpx: the collectives are deadlocked, every rank waiting for another, as world rank ";
inline const std::string question =
    ". Is a collective inside rank-dependent control flow, e.g. `if (rank.world_rank() == 0)`?";

}  // namespace stand_in

// The watchdog of ranks that are threads of one process (comm/in_process_watchdog.hpp), which
// spmd(tpx::cuda_devices, ...) gives its NCCL communicators with collectives checked, driven here
// as NcclCommunicator drives it, through the exchange_watcher interface, by stand-in exchanges
// on a 2x2 mesh (groups of X {0,2} {1,3}, of Y {0,1} {2,3}, of both {0,1,2,3}): exchange #n of a
// group completes once every member has posted #n, as the NCCL all-gather of the records does,
// and a rank that returns posts its "returned" exchange on every group and waits for them all,
// as nccl_mesh::return_from_groups does. Proven: ranks waiting in each other's collectives, and
// such a cycle through a rank that returned, make every rank fail within seconds (the timeout is
// 60 s) with the picture of who waits where; a correct program whose ranks arrive late, or keep
// pace through many exchanges, is never taken for a deadlock; and a stand-in's timeout message
// can say what the watchdog last heard. The expected pictures are written out from each test's
// program. The same watchdog on real GPUs: tests/cuda/mesh_test.cu (2 GPUs).
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <tpx/comm/in_process_watchdog.hpp>
#include <tpx/tpx.hpp>
#include <vector>

namespace {
TPX_MESH_AXES(X, Y);

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using MeshT = tpx::Mesh<X, Y>;

constexpr unsigned x = 1, y = 2, xy = 3;  // the groups' ids: their axis sets' masks
constexpr int ranks = 4;

// The stand-in exchanges of one run: how many each rank has posted on each group.
class StandIn {
 public:
  StandIn(std::chrono::milliseconds timeout, std::vector<std::string> hosts = {})
      : timeout_(timeout),
        watchdog_(ranks, timeout, tpx::detail::mesh_group_layout(mesh_), std::move(hosts)) {}

  // Rank r's next exchange on group `mask`: returns once every member has posted it; throws what
  // the watchdog throws, or runtime_error with what it last heard after the timeout.
  void exchange(int r, unsigned mask) {
    tpx::detail::exchange_watcher& watcher = watchdog_.of(r);
    const std::uint64_t sequence = post(r, mask);
    watcher.posted(mask, sequence);
    await(r, {mask, sequence, call()}, [&] { return complete(r, mask, sequence); });
  }

  // Rank r has returned: posts its "returned" exchange on every group and waits for them all.
  void return_from_groups(int r) {
    tpx::detail::exchange_watcher& watcher = watchdog_.of(r);
    std::array<std::uint64_t, 4> sequence{};
    for (const unsigned mask : {x, y, xy}) {
      sequence[mask] = post(r, mask);
      watcher.posted(mask, sequence[mask]);
    }
    await(r, {}, [&] {
      return complete(r, x, sequence[x]) && complete(r, y, sequence[y]) &&
             complete(r, xy, sequence[xy]);
    });
  }

 private:
  static tpx::detail::CallRecord call() {
    return tpx::detail::record_of(
        tpx::detail::collective_call<float>(tpx::detail::CollectiveOp::all_reduce, 8, {}));
  }

  std::uint64_t post(int r, unsigned mask) {
    return posted_[mask][static_cast<std::size_t>(r)].fetch_add(1, std::memory_order_release) + 1;
  }
  bool complete(int r, unsigned mask, std::uint64_t sequence) const {
    for (int m = 0; m < ranks; ++m)
      if (tpx::detail::coords_off_axes(mesh_, m, mask) ==
              tpx::detail::coords_off_axes(mesh_, r, mask) &&
          posted_[mask][static_cast<std::size_t>(m)].load(std::memory_order_acquire) < sequence)
        return false;
    return true;
  }
  template <class Done>
  void await(int r, const tpx::detail::exchange_wait& where, Done&& done) {
    tpx::detail::exchange_watcher& watcher = watchdog_.of(r);
    const auto start = Clock::now();
    while (!done()) {
      const auto waited = Clock::now() - start;
      if (waited > timeout_) throw std::runtime_error("timed out." + watcher.last_heard());
      watcher.waiting(where, waited);
      std::this_thread::yield();
    }
    watcher.done_waiting();
  }

  MeshT mesh_{2, 2};
  std::chrono::milliseconds timeout_;
  tpx::detail::InProcessWatchdog watchdog_;
  std::array<std::array<std::atomic<std::uint64_t>, ranks>, 4> posted_{};  // [mask][rank]
};

// What each rank threw ("" if it finished), and how long the run took.
struct Outcome {
  std::array<std::string, ranks> thrown;
  Clock::duration took{};
};

// Runs program(stand_in, rank) on a thread per rank; a rank that finishes returns from its groups.
Outcome run(StandIn& stand_in, const std::function<void(StandIn&, int)>& program) {
  Outcome outcome;
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        program(stand_in, r);
        stand_in.return_from_groups(r);
      } catch (const std::exception& e) {
        outcome.thrown[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  outcome.took = Clock::now() - start;
  return outcome;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string kDeadlocked =
    "tpx: the collectives are deadlocked, every rank waiting for another, as world rank ";
const std::string kQuestion =
    ". Is a collective inside rank-dependent control flow, e.g. `if (rank.world_rank() == 0)`?";

// Every rank failed within 10 s (the timeout is 60 s) with the verdict whose picture is `picture`.
void check_every_rank_fails_with(const Outcome& outcome, const std::string& picture) {
  for (const std::string& what : outcome.thrown) {
    CHECK_MESSAGE(what.starts_with(kDeadlocked), what);
    CHECK_MESSAGE(contains(what, " ms: " + picture + kQuestion), what);
  }
  CHECK(outcome.took < 10s);
}

const std::string kAllReduce = "all_reduce<float> of 8 elements";

}  // namespace

TEST_CASE("ranks waiting in each other's collectives all fail at once with the picture") {
  // Rank 0 calls Y's exchange, then the world's; the others the world's, then Y's.
  StandIn stand_in(60s);
  const Outcome outcome = run(stand_in, [](StandIn& s, int r) {
    if (r == 0) s.exchange(r, y);
    s.exchange(r, xy);
    if (r != 0) s.exchange(r, y);
  });
  check_every_rank_fails_with(
      outcome, "world rank 0 waits in collective #1 on group {0,1} (mesh axis Y), " + kAllReduce +
                   ", which world rank 1 has not called; world ranks {1,2,3} wait in collective "
                   "#1 on group {0,1,2,3} (mesh axes X, Y), " +
                   kAllReduce + ", which world rank 0 has not called");
}

TEST_CASE("a cycle through a rank that returned is found too, naming the hosts") {
  // Rank 0 waits in X's exchange for rank 2, rank 1 in Y's for rank 0, rank 2 in the world's for
  // ranks 0 and 1, and rank 3 has returned: its "returned" exchange on X waits for rank 1.
  StandIn stand_in(60s, {"n0", "n1", "n2", "n3"});
  const Outcome outcome = run(stand_in, [](StandIn& s, int r) {
    if (r == 0) s.exchange(r, x);
    if (r == 1) s.exchange(r, y);
    if (r == 2) s.exchange(r, xy);
  });
  check_every_rank_fails_with(
      outcome, "world rank 0 waits in collective #1 on group {0,2} (mesh axis X), " + kAllReduce +
                   ", which world rank 2 (host n2) has not called; world rank 1 waits in "
                   "collective #1 on group {0,1} (mesh axis Y), " +
                   kAllReduce +
                   ", which world rank 0 (host n0) has not called; world rank 2 waits in "
                   "collective #1 on group {0,1,2,3} (mesh axes X, Y), " +
                   kAllReduce +
                   ", which world ranks 0 (host n0), 1 (host n1) have not called; world rank 3 "
                   "(host n3) returned");
}

TEST_CASE("a correct program whose ranks arrive late is not taken for a deadlock") {
  // Arrivals 200 ms apart, twice the watchdog's 100 ms before a wait is announced.
  StandIn stand_in(60s);
  const Outcome outcome = run(stand_in, [](StandIn& s, int r) {
    std::this_thread::sleep_for(200ms * r);
    s.exchange(r, xy);
    std::this_thread::sleep_for(200ms * (3 - r));
    s.exchange(r, y);
    if (r == 2) std::this_thread::sleep_for(200ms);
    s.exchange(r, x);
    if (r == 1) std::this_thread::sleep_for(200ms);
  });
  for (const std::string& what : outcome.thrown) CHECK_MESSAGE(what.empty(), what);
}

TEST_CASE("many exchanges in random arrival orders are never taken for a deadlock") {
  // 150 exchanges per rank on X, Y and the world in one order, each after a random pause; one in
  // 30 pauses is 120 ms, past the announcement, so waits are announced and judged often.
  StandIn stand_in(60s);
  const Outcome outcome = run(stand_in, [](StandIn& s, int r) {
    std::mt19937 random(static_cast<unsigned>(r) + 7u);
    std::uniform_int_distribution<int> pause_us(0, 300), long_pause(0, 29);
    for (int i = 0; i < 150; ++i) {
      const bool long_one = long_pause(random) == 0;
      std::this_thread::sleep_for(long_one ? 120ms : std::chrono::microseconds(pause_us(random)));
      s.exchange(r, std::array{x, y, xy}[static_cast<std::size_t>(i % 3)]);
    }
  });
  for (const std::string& what : outcome.thrown) CHECK_MESSAGE(what.empty(), what);
}

TEST_CASE("a rank stuck outside any collective: the timeout can say what the watchdog heard") {
  // Rank 1 computes for 1 s while the others wait in the world's exchange for 600 ms.
  StandIn stand_in(600ms);
  const Outcome outcome = run(stand_in, [](StandIn& s, int r) {
    if (r == 1) {
      std::this_thread::sleep_for(1000ms);
      throw std::runtime_error("rank 1 gave up");
    }
    s.exchange(r, xy);
  });
  for (const int r : {0, 2, 3})
    CHECK_MESSAGE(outcome.thrown[static_cast<std::size_t>(r)] ==
                      "timed out. This process's watchdog last heard: world rank 1 not waiting "
                      "in any collective; world ranks {0,2,3} wait in collective #1 on group "
                      "{0,1,2,3} (mesh axes X, Y), " +
                          kAllReduce + ".",
                  outcome.thrown[static_cast<std::size_t>(r)]);
}

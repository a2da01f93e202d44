// The watchdog of ranks that are threads of one process (comm/in_process_watchdog.hpp), which
// spmd(tpx::cuda_devices, ...) gives its NCCL communicators with collectives checked, driven as
// NcclCommunicator drives it by the stand-in exchanges of tests/support/stand_in_exchanges.hpp
// on a 2x2 mesh. Proven: ranks waiting in each other's collectives, and such a cycle through a
// rank that returned, make every rank fail within seconds (the timeout is 60 s) with the picture
// of who waits where; a correct program whose ranks arrive late, or keep pace through many
// exchanges, is never taken for a deadlock; and a timeout's message can say what the watchdog
// last heard. The same watchdog on real GPUs: tests/cuda/mesh_test.cu (2 GPUs).
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <string>
#include <tpx/comm/in_process_watchdog.hpp>
#include <tpx/tpx.hpp>
#include <utility>
#include <vector>

#include "../support/stand_in_exchanges.hpp"

namespace {
using namespace std::chrono_literals;
namespace s = stand_in;

// Runs program(exchanges, rank) on every rank, each reporting to one InProcessWatchdog, then
// returns it from its groups.
s::Outcome run(std::chrono::milliseconds timeout,
               const std::function<void(s::Exchanges&, int)>& program,
               std::vector<std::string> hosts = {}) {
  s::Exchanges exchanges(timeout);
  tpx::detail::InProcessWatchdog watchdog(
      s::ranks, timeout, tpx::detail::mesh_group_layout(s::mesh()), std::move(hosts));
  return s::run([&](int r) {
    exchanges.watch(r, watchdog.of(r));
    program(exchanges, r);
    exchanges.return_from_groups(r);
  });
}

// Every rank failed within 10 s (the timeout is 60 s) with the verdict whose picture is `picture`.
void check_every_rank_fails_with(const s::Outcome& outcome, const std::string& picture) {
  for (const std::string& what : outcome.thrown) {
    CHECK_MESSAGE(what.starts_with(s::deadlocked), what);
    CHECK_MESSAGE(s::contains(what, " ms: " + picture + s::question), what);
  }
  CHECK(outcome.took < 10s);
}

std::string plainly(int r) { return "world rank " + std::to_string(r); }
std::string with_host(int r) { return plainly(r) + " (host n" + std::to_string(r) + ")"; }

}  // namespace

TEST_CASE("ranks waiting in each other's collectives all fail at once with the picture") {
  check_every_rank_fails_with(run(60s, s::cycle), s::cycle_picture(plainly));
}

TEST_CASE("a cycle through a rank that returned is found too, naming the hosts") {
  check_every_rank_fails_with(
      run(60s, s::cycle_through_a_return, {"n0", "n1", "n2", "n3"}),
      s::cycle_through_a_return_picture(with_host, "world ranks 0 (host n0), 1 (host n1)"));
}

TEST_CASE("correct programs, their ranks arriving late or in random orders, are not deadlocks") {
  for (const auto& [name, program] : s::correct_programs) {
    INFO(name);
    for (const std::string& what : run(60s, program).thrown) CHECK_MESSAGE(what.empty(), what);
  }
}

TEST_CASE("a rank stuck outside any collective: the timeout can say what the watchdog heard") {
  // Rank 1 computes for 1 s while the others wait in the world's exchange for 600 ms.
  const s::Outcome outcome =
      run(600ms, [](s::Exchanges& e, int r) { s::stuck_outside(e, r, 1000ms); });
  for (const int r : {0, 2, 3})
    CHECK_MESSAGE(outcome.thrown[static_cast<std::size_t>(r)] ==
                      "timed out. This process's watchdog last heard: " + s::stuck_outside_heard,
                  outcome.thrown[static_cast<std::size_t>(r)]);
}

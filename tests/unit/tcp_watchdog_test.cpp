// The heartbeat of processes started by torchrun or srun without MPI (comm/tcp_watchdog.hpp),
// over the connections the TCP rendezvous leaves open (tcp_rendezvous_linked), which
// cuda::run_launched_rank gives its NCCL communicators with collectives checked. Four ranks, each
// a thread with a launch environment of its own, meet at a rendezvous on a free port of this
// machine, then drive their watchdogs as NcclCommunicator does with the stand-in exchanges of
// tests/support/stand_in_exchanges.hpp on a 2x2 mesh; the heartbeat starts after 100 ms (1 s by
// default) so that the tests are short. Proven: ranks waiting in each other's collectives, and
// such a cycle through a rank that returned, make every rank fail within seconds (the timeout is
// 60 s) with the picture from world rank 0, which the others learn over their connection; a
// correct program whose ranks arrive late, or keep pace through many exchanges, is never taken
// for a deadlock; and rank 0's timeout says what it last heard (the default heartbeat, half the
// timeout).
#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <tpx/comm/tcp_watchdog.hpp>
#include <tpx/launch/tcp_rendezvous.hpp>
#include <tpx/tpx.hpp>
#include <vector>

#include "../support/free_port.hpp"
#include "../support/stand_in_exchanges.hpp"

namespace {
using namespace std::chrono_literals;
namespace s = stand_in;

// Runs program(exchanges, rank) on every rank, each with a TcpWatchdog over the rendezvous on
// `port`, then returns it from its groups.
s::Outcome run(std::chrono::milliseconds timeout,
               const std::function<void(s::Exchanges&, int)>& program,
               std::optional<std::chrono::milliseconds> heartbeat_after = 100ms) {
  s::Exchanges exchanges(timeout);
  const int port = free_port();
  return s::run([&](int r) {
    const tpx::launch_environment env{.rank = r,
                                      .world_size = s::ranks,
                                      .local_rank = r,
                                      .master_addr = "127.0.0.1",
                                      .rendezvous_port = port,
                                      .port_origin = "the test's free port",
                                      .launcher = "torchrun"};
    const std::vector<std::byte> nothing;
    tpx::detail::TcpWatchdog watchdog(
        r, s::ranks, timeout, tpx::detail::mesh_group_layout(s::mesh()),
        tpx::tcp_rendezvous_linked(env, nothing, "tcp_watchdog_test", 20s), heartbeat_after);
    exchanges.watch(r, watchdog);
    program(exchanges, r);
    exchanges.return_from_groups(r);
  });
}

// Every rank failed within 10 s (the timeout is 60 s) with world rank 0's verdict, whose picture
// is `picture`.
void check_every_rank_fails_with(const s::Outcome& outcome, const std::string& picture) {
  for (const std::string& what : outcome.thrown) {
    CHECK_MESSAGE(what.starts_with(s::deadlocked + "0 found after waiting "), what);
    CHECK_MESSAGE(s::contains(what, " ms: " + picture + s::question), what);
  }
  CHECK(outcome.took < 10s);
}

std::string plainly(int r) { return "world rank " + std::to_string(r); }

}  // namespace

TEST_CASE("ranks waiting in each other's collectives all fail with rank 0's picture") {
  check_every_rank_fails_with(run(60s, s::cycle), s::cycle_picture(plainly));
}

TEST_CASE("a cycle through a rank that returned is found too") {
  check_every_rank_fails_with(run(60s, s::cycle_through_a_return),
                              s::cycle_through_a_return_picture(plainly, "world ranks 0, 1"));
}

TEST_CASE("correct programs, their ranks arriving late or in random orders, are not deadlocks") {
  for (const auto& [name, program] : s::correct_programs) {
    INFO(name);
    for (const std::string& what : run(60s, program).thrown) CHECK_MESSAGE(what.empty(), what);
  }
}

TEST_CASE("a rank stuck outside any collective: rank 0's timeout says what it heard") {
  // Rank 1 computes for 1 s while the others wait in the world's exchange for 600 ms; the
  // heartbeat starts at half of that, its default.
  const s::Outcome outcome = run(
      600ms, [](s::Exchanges& e, int r) { s::stuck_outside(e, r, 1000ms); }, std::nullopt);
  CHECK(outcome.thrown[0] == "timed out. World rank 0 last heard: " + s::stuck_outside_heard);
  CHECK(outcome.thrown[2] == "timed out.");
  CHECK(outcome.thrown[3] == "timed out.");
}

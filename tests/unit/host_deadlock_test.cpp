// Deadlocks on the host backend (comm/host_waits.hpp): when every rank that has not returned
// waits in a collective that can never complete, every one of them fails at once with the same
// wait-for picture, long before the timeout. Proven on a 2x2 mesh for a cycle (ranks waiting in
// collectives of different groups) and for a collective one rank adds while the others go on, on
// a world whose last free rank returns while two others wait for each other; and the other side
// of exactness: a rank that starts late is not taken for a deadlock, nor are thousands of quick
// collectives on rows, columns and the whole mesh whose ranks arrive in random orders, after
// random delays on both sides of the 50 us spin, each result checked against its sum.
//
// The expected pictures are written out from the program each test runs: who waits where, and
// which members of each group never came to its collective.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <tpx/tpx.hpp>
#include <vector>

#include "../support/message_of.hpp"

namespace {
TPX_MESH_AXES(X, Y);

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kDeadlock =
    "tpx: deadlock: no collective can complete, every rank that has not returned waits in one: ";
const std::string kQuestion =
    ". Is a collective inside rank-dependent control flow, or do ranks call the collectives of "
    "different groups in different orders?";

// Runs fn on every rank of a 2x2 mesh with a 60 s timeout and checks that all ranks fail within
// a second, each with the deadlock whose waits are `waits`, and spmd with rank 0's failure.
void expect_deadlock_2x2(const std::function<void(tpx::Rank<tpx::Mesh<X, Y>>&)>& fn,
                         const std::string& waits) {
  std::vector<std::string> thrown(4);
  const auto start = Clock::now();
  const std::string what = message_of([&] {
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2},
              [&](auto& rank) {
                try {
                  fn(rank);
                } catch (const std::exception& e) {
                  thrown[rank.world_rank()] = e.what();
                  throw;
                }
              },
              {.timeout = 60s});
  });
  CHECK(Clock::now() - start < 1s);
  const std::string picture = kDeadlock + waits + kQuestion;
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(thrown[r] == picture);
  }
  CHECK(what == "tpx: rank 0 (X=0, Y=0) failed: " + picture);
}

void all_reduce_four(tpx::any_communicator& group) {
  std::vector<float> data(4, 1.0f);
  group.all_reduce(std::span<const float>(data), std::span<float>(data));
}
}  // namespace

TEST_CASE("ranks waiting in collectives of different groups fail at once with the picture") {
  // Rank 0 calls its row's barrier, then the mesh's; the others the mesh's, then their row's.
  // World rank = 2 X + Y, so rank 0's row (mesh axis Y) is {0,1}.
  expect_deadlock_2x2(
      [](auto& rank) {
        if (rank.world_rank() == 0) {
          rank.template group<Y>().barrier();
          rank.template group<X, Y>().barrier();
        } else {
          rank.template group<X, Y>().barrier();
          rank.template group<Y>().barrier();
        }
      },
      "world rank 0 waits in collective #1 on group {0,1} (mesh axis Y), barrier, where {1} "
      "never came; world ranks {1,2,3} wait in collective #1 on group {0,1,2,3} (mesh axes X, "
      "Y), barrier, where {0} never came");
}

TEST_CASE("a collective one rank adds while the others go on fails at once with the picture") {
  // All reduce over their rows; rank 2 then adds a sum over its column {0,2} while the others go
  // on to the mesh's barrier.
  expect_deadlock_2x2(
      [](auto& rank) {
        all_reduce_four(rank.template group<Y>());
        if (rank.world_rank() == 2) all_reduce_four(rank.template group<X>());
        rank.template group<X, Y>().barrier();
      },
      "world ranks {0,1,3} wait in collective #1 on group {0,1,2,3} (mesh axes X, Y), barrier, "
      "where {2} never came; world rank 2 waits in collective #1 on group {0,2} (mesh axis X), "
      "all_reduce<float> of 4 elements, where {0} never came");
}

TEST_CASE("two ranks waiting for each other fail when the last rank that could come returns") {
  // Ranks 0 and 1 share two groups and call them in opposite orders; rank 2, in neither, is busy
  // for a while and returns: from then on nobody can come.
  tpx::HostWorld world(3, {.timeout = 60s});
  const int first = world.add_groups({{0, 1}}, "first pair");
  const int second = world.add_groups({{0, 1}}, "second pair");
  std::vector<std::string> thrown(3);
  const auto start = Clock::now();
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < 3; ++r) {
      ranks.emplace_back([&, r] {
        try {
          if (r == 2) {
            std::this_thread::sleep_for(100ms);
          } else {
            tpx::HostCommunicator a(world, r == 0 ? first : second, r);
            tpx::HostCommunicator b(world, r == 0 ? second : first, r);
            a.barrier();
            b.barrier();
          }
          world.finish(r);
        } catch (const std::exception& e) {
          thrown[r] = e.what();
          world.abort(r, e.what());
        }
      });
    }
  }
  CHECK(Clock::now() - start < 1s);
  const std::string picture =
      kDeadlock +
      "world rank 0 waits in collective #1 on group {0,1} (first pair), barrier, where {1} never "
      "came; world rank 1 waits in collective #1 on group {0,1} (second pair), barrier, where {0} "
      "never came" +
      kQuestion;
  CHECK(thrown[0] == picture);
  CHECK(thrown[1] == picture);
  CHECK(thrown[2] == "");
  // The world is unusable from then on, and says why.
  tpx::HostCommunicator late(world, first, 0);
  CHECK_THROWS_WITH_AS(late.barrier(),
                       doctest::Contains("tpx: collective #2 on group {0,1} (first pair), barrier, "
                                         "aborted: deadlock: no collective can complete"),
                       tpx::comm_error);
}

TEST_CASE("ranks that start late are not taken for a deadlock") {
  // Ranks 0 and 1 wait in the world's barrier before rank 2's thread even exists.
  tpx::HostWorld world(3, {.timeout = 60s});
  std::vector<std::string> thrown(3);
  std::atomic<int> passed{0};
  const auto rank = [&](int r) {
    try {
      tpx::HostCommunicator(world, tpx::HostWorld::whole_world, r).barrier();
      ++passed;
      world.finish(r);
    } catch (const std::exception& e) {
      thrown[r] = e.what();
      world.abort(r, e.what());
    }
  };
  {
    std::jthread zero(rank, 0), one(rank, 1);
    std::this_thread::sleep_for(100ms);
    std::jthread two(rank, 2);
  }
  CHECK(passed == 3);
  CHECK(thrown == std::vector<std::string>(3));
}

TEST_CASE("quick collectives in random arrival orders are never taken for a deadlock") {
  // Each step on a 2x2 mesh: the ranks of row 0 sum over their row, then their column; the
  // ranks of row 1 over their column, then their row (a valid order: every collective
  // completes); then a barrier of the whole mesh. Before each collective a rank waits a random
  // while: none, a few microseconds (its peers still spin), or longer than the spin (they sleep
  // and are recorded as waiting). No rank may ever fail, and every sum must be right.
  constexpr int steps = 2000;
  std::atomic<int> wrong{0};
  const auto start = Clock::now();
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2},
            [&](auto& rank) {
              const int r = rank.world_rank();
              std::mt19937 random(static_cast<unsigned>(17 + r));
              std::uniform_int_distribution<int> pause(0, 2);
              const auto pause_a_while = [&] {
                switch (pause(random)) {
                  case 0:
                    return;
                  case 1:  // a busy wait: sleep_for rounds up to the timer's slack, about 50 us
                    for (const auto until = Clock::now() + 5us; Clock::now() < until;) {
                    }
                    return;
                  default:
                    std::this_thread::sleep_for(80us);
                }
              };
              // Sums of the world ranks: rows {0,1} and {2,3}, columns {0,2} and {1,3}.
              const auto sum_over = [&](tpx::any_communicator& group, float expected, int step) {
                pause_a_while();
                float x = static_cast<float>(r + step), sum = 0;
                group.all_reduce(std::span<const float>(&x, 1), std::span<float>(&sum, 1));
                if (sum != expected + 2.0f * static_cast<float>(step)) ++wrong;
              };
              const float row_sum = r < 2 ? 1.0f : 5.0f;
              const float column_sum = r % 2 == 0 ? 2.0f : 4.0f;
              for (int step = 0; step < steps; ++step) {
                if (r < 2) {
                  sum_over(rank.template group<Y>(), row_sum, step);
                  sum_over(rank.template group<X>(), column_sum, step);
                } else {
                  sum_over(rank.template group<X>(), column_sum, step);
                  sum_over(rank.template group<Y>(), row_sum, step);
                }
                pause_a_while();
                rank.template group<X, Y>().barrier();
              }
            },
            {.timeout = 60s});
  CHECK(wrong == 0);
  MESSAGE("2000 steps of 3 collectives in ",
          std::chrono::duration<double>(Clock::now() - start).count(), " s");
}

// The fibers that emulated thread blocks run on (tests/support/fiber_team.hpp): their barriers
// against std::barrier's contract, a deadlock reported instead of hung, and teams run again on
// reused stacks. The order checks number every event from one counter and compare the sequence
// with the contract, not with the scheduler's order: no fiber leaves a barrier before all of its
// fibers arrived, and whatever a fiber wrote before a barrier, every other reads after it.
// Under ThreadSanitizer (CI's tsan stage) the same cases check that the barriers are declared as
// the fibers' only synchronization correctly: a missing release or acquire is a reported race on
// the slots, a misplaced one a race on the team's own state.
#include "../support/fiber_team.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using tpx::testing::fiber_team;

constexpr int groups = 3, group_size = 4, fibers = groups * group_size, rounds = 5;

struct event {
  int sequence;
  int round;
};

TEST_CASE("a fiber leaves a barrier only after every fiber of the barrier has arrived") {
  fiber_team team(fibers);
  fiber_team::barrier all(team, fibers, "all");
  std::vector<std::unique_ptr<fiber_team::barrier>> group_barriers;
  for (int g = 0; g < groups; ++g)
    group_barriers.push_back(std::make_unique<fiber_team::barrier>(team, group_size, "group"));
  std::atomic<int> sequence{0};
  // Per fiber: when it arrived at its group's barrier, left it, and left the barrier of all.
  std::vector<std::vector<event>> arrived(fibers), left_group(fibers), left_all(fibers);
  const auto caller = std::this_thread::get_id();
  std::vector<char> on_caller_thread(fibers, 0);
  team.run([&](int f) {
    on_caller_thread[f] = std::this_thread::get_id() == caller;
    for (int r = 0; r < rounds; ++r) {
      arrived[f].push_back({sequence.fetch_add(1, std::memory_order_relaxed), r});
      group_barriers[f / group_size]->arrive_and_wait();
      left_group[f].push_back({sequence.fetch_add(1, std::memory_order_relaxed), r});
      all.arrive_and_wait();
      left_all[f].push_back({sequence.fetch_add(1, std::memory_order_relaxed), r});
    }
  });
  CHECK(std::count(on_caller_thread.begin(), on_caller_thread.end(), 1) == fibers);
  for (int f = 0; f < fibers; ++f) {
    REQUIRE(arrived[f].size() == rounds);
    REQUIRE(left_group[f].size() == rounds);
    REQUIRE(left_all[f].size() == rounds);
  }
  for (int f = 0; f < fibers; ++f) {
    for (int r = 0; r < rounds; ++r) {
      CAPTURE(f);
      CAPTURE(r);
      for (int other = 0; other < fibers; ++other) {
        if (other / group_size == f / group_size)
          CHECK(arrived[other][r].sequence < left_group[f][r].sequence);
        CHECK(left_group[other][r].sequence < left_all[f][r].sequence);
      }
    }
  }
}

TEST_CASE("what a fiber writes before a barrier every fiber reads after it") {
  fiber_team team(fibers);
  fiber_team::barrier all(team, fibers, "all");
  std::vector<int> slots(fibers, 0);
  std::vector<std::vector<int>> sums(fibers);
  team.run([&](int f) {
    for (int r = 1; r <= rounds; ++r) {
      slots[f] = (f + 1) * r;
      all.arrive_and_wait();
      int sum = 0;
      for (int value : slots) sum += value;
      sums[f].push_back(sum);
      all.arrive_and_wait();  // nobody writes the next round's value before all have read
    }
  });
  for (int f = 0; f < fibers; ++f) {
    REQUIRE(sums[f].size() == rounds);
    for (int r = 1; r <= rounds; ++r) CHECK(sums[f][r - 1] == r * fibers * (fibers + 1) / 2);
  }
}

TEST_CASE("a deadlock throws, naming where each fiber waits, and later teams run") {
  {
    fiber_team team(6);
    fiber_team::barrier rendezvous(team, 6, "the rendezvous");
    std::string what;
    try {
      team.run([&](int f) {
        if (f >= 2) rendezvous.arrive_and_wait();  // fibers 0 and 1 never arrive
      });
    } catch (const std::logic_error& e) {
      what = e.what();
    }
    CHECK(what.find("deadlock") != std::string::npos);
    CHECK(what.find("fibers 0-1: returned") != std::string::npos);
    CHECK(what.find("fibers 2-5: waiting at the rendezvous (4 of 6 arrived)") != std::string::npos);
  }
  // The stuck fibers' stacks are reused by the next team.
  fiber_team team(8);
  fiber_team::barrier all(team, 8, "all");
  std::vector<int> values(8, 0), seen(8, 0);
  team.run([&](int f) {
    values[f] = f;
    all.arrive_and_wait();
    seen[f] = values[(f + 1) % 8];
  });
  for (int f = 0; f < 8; ++f) CHECK(seen[f] == (f + 1) % 8);
}

TEST_CASE("a team runs again, each fiber from its start") {
  fiber_team team(4);
  fiber_team::barrier all(team, 4, "all");
  std::vector<int> calls(4, 0);
  for (int run = 0; run < 3; ++run)
    team.run([&](int f) {
      all.arrive_and_wait();
      ++calls[f];
      all.arrive_and_wait();
    });
  for (int f = 0; f < 4; ++f) CHECK(calls[f] == 3);
}

}  // namespace

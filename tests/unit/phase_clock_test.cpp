// Phase timing on the host (spmd/phase_clock.hpp): each rank thread's marks divide its work into
// phases, added up by name in the order first marked, with how often each was marked. Checked
// against the wall clock without timing assumptions beyond its direction: a phase that holds a
// spin of at least s seconds measures at least s, and the phases together measure no more than
// the wall time around them, less the spins that no phase holds. Also: reset forgets the time but
// keeps the names; marks on a thread without a timing (another thread of the rank, or after the
// timing ends) time nothing; a thread times its phases once at a time. The trainer's phases:
// tests/trainer/gpt_test.cpp; on a GPU: tests/cuda/trainer_test.cu.
#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <tpx/spmd/phase_clock.hpp>
#include <tpx/tpx.hpp>
#include <vector>

namespace {
TPX_MESH_AXES(X);

using wall = std::chrono::steady_clock;

// Spins until `seconds` of wall time have passed.
void spin(double seconds) {
  const auto until = wall::now() + std::chrono::duration<double>(seconds);
  while (wall::now() < until) {
  }
}

double seconds_since(wall::time_point start) {
  return std::chrono::duration<double>(wall::now() - start).count();
}

std::vector<std::string> names_of(const std::vector<tpx::phase_time>& phases) {
  std::vector<std::string> names;
  for (const tpx::phase_time& p : phases) names.push_back(p.name);
  return names;
}
}  // namespace

TEST_CASE("each rank thread's phases add up by name, bounded by the wall time around them") {
  const double s = 1e-3;
  tpx::spmd(tpx::host, tpx::Mesh<X>{2}, [&](auto& rank) {
    tpx::phase_timing timing(rank);
    const auto start = wall::now();
    tpx::mark_phase("a");
    spin(s);
    tpx::mark_phase("b");
    spin(s);
    tpx::mark_phase("a");
    spin(s);
    tpx::mark_phase("");
    spin(s);  // in no phase
    const double around = seconds_since(start);
    const std::vector<tpx::phase_time> phases = timing.totals();
    REQUIRE(names_of(phases) == std::vector<std::string>{"a", "b"});
    CHECK(phases[0].count == 2);
    CHECK(phases[1].count == 1);
    CHECK(phases[0].seconds >= 2 * s);
    CHECK(phases[1].seconds >= s);
    CHECK(phases[0].seconds + phases[1].seconds <= around - s);
  });
}

TEST_CASE("reset forgets the time so far and keeps the phases' names") {
  tpx::spmd(tpx::host, tpx::Mesh<X>{1}, [&](auto& rank) {
    tpx::phase_timing timing(rank);
    tpx::mark_phase("warm-up");
    spin(1e-4);
    tpx::mark_phase("");
    timing.reset();
    std::vector<tpx::phase_time> phases = timing.totals();
    REQUIRE(names_of(phases) == std::vector<std::string>{"warm-up"});
    CHECK(phases[0].count == 0);
    CHECK(phases[0].seconds == 0);
    tpx::mark_phase("step");
    spin(1e-4);
    tpx::mark_phase("");
    phases = timing.totals();
    REQUIRE(names_of(phases) == std::vector<std::string>{"warm-up", "step"});
    CHECK(phases[0].count == 0);
    CHECK(phases[1].count == 1);
    CHECK(phases[1].seconds >= 1e-4);
  });
}

TEST_CASE("marks on a thread without a timing time nothing; a thread times its phases once at a time") {
  tpx::spmd(tpx::host, tpx::Mesh<X>{1}, [&](auto& rank) {
    tpx::mark_phase("before");  // no timing yet: nothing happens
    {
      tpx::phase_timing timing(rank);
      CHECK_THROWS_AS([&] { tpx::phase_timing second{rank}; }(), std::logic_error);
      tpx::mark_phase("mine");
      std::thread other([] {
        tpx::mark_phase("other thread");
        tpx::mark_phase("");
      });
      other.join();
      tpx::mark_phase("");
      CHECK(names_of(timing.totals()) == std::vector<std::string>{"mine"});
    }
    tpx::mark_phase("after");  // the timing has ended
    tpx::phase_timing again(rank);
    tpx::mark_phase("again");
    tpx::mark_phase("");
    CHECK(names_of(again.totals()) == std::vector<std::string>{"again"});
  });
}

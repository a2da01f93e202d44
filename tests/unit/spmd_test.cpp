// The host SPMD launcher: ranks see the right mesh coordinates and groups; a rank that throws
// makes spmd fail with an error naming it while the other ranks, blocked in a collective, are
// released instead of hanging; a collective that some rank skips (rank-dependent control flow)
// fails as soon as that rank returns, naming the collective, its group's mesh axes, who joined
// and who returned, well within the default 5-minute timeout, whether one rank calls it alone or
// all but one do; a rank that never joins a collective while it is busy elsewhere makes it time
// out with the missing rank named; an axis the mesh lacks is a run-time error naming it (where
// the type system cannot see the mesh).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <latch>
#include <stdexcept>
#include <string>
#include <tpx/tpx.hpp>

#include "../support/message_of.hpp"

namespace {
TPX_MESH_AXES(X, Y, Z);
TPX_DIMS(B, D);
}  // namespace

TEST_CASE("ranks know their coordinates and groups") {
  std::atomic<int> wrong{0};
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 3}, [&](auto& rank) {
    const int r = rank.world_rank();
    if (rank.template coord<X>() != r / 3 || rank.template coord<Y>() != r % 3) ++wrong;
    if (rank.template group<X>().size() != 2 || rank.template group<Y>().size() != 3 ||
        rank.template group<X, Y>().size() != 6)
      ++wrong;
    if (rank.template group<X>().rank() != r / 3 || rank.template group<Y>().rank() != r % 3)
      ++wrong;
    // A sum over the Y group: the ranks of row x hold 3x, 3x+1, 3x+2.
    float mine = static_cast<float>(r), sum = 0;
    rank.template group<Y>().all_reduce(std::span<const float>(&mine, 1),
                                        std::span<float>(&sum, 1));
    const int x = r / 3;
    if (sum != static_cast<float>(9 * x + 3)) ++wrong;
  });
  CHECK(wrong == 0);
}

TEST_CASE("a rank that throws fails spmd with its name, and nobody hangs") {
  const auto start = std::chrono::steady_clock::now();
  const std::string what = message_of([] {
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2},
              [](auto& rank) {
                auto t = tpx::randn<float, B<X>, D<Y>>(rank, {B(4), D(4)}, 1);
                if (rank.world_rank() == 2) throw std::runtime_error("bad batch");
                (void)tpx::all_gather<X>(t);  // the others wait here for rank 2
              },
              {.timeout = std::chrono::seconds(60)});
  });
  CHECK(what == "tpx: rank 2 (X=1, Y=0) failed: bad batch");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}

TEST_CASE("the original exception is nested in spmd_error") {
  try {
    tpx::spmd(tpx::host, tpx::Mesh<X>{3}, [](auto& rank) {
      if (rank.world_rank() == 1) throw std::out_of_range("index 7");
    });
    FAIL("spmd returned");
  } catch (const tpx::spmd_error& e) {
    CHECK(e.rank() == 1);
    CHECK_THROWS_AS(std::rethrow_if_nested(e), std::out_of_range);
  }
}

TEST_CASE("a collective only rank 0 calls fails when its partner returns, not at the timeout") {
  const auto start = std::chrono::steady_clock::now();
  const std::string what = message_of([] {
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [](auto& rank) {  // the default timeout: 5 min
      const auto t = tpx::randn<float, B<X>, D<>>(rank, {B(4), D(2)}, 1);
      if (rank.world_rank() == 0) (void)tpx::to_global(t);  // gathers over X: ranks 0 and 2
    });
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  INFO(what);
  CHECK(elapsed < std::chrono::seconds(10));
  CHECK(what ==
        "tpx: rank 0 (X=0, Y=0) failed: tpx: collective #1 on group {0,2} (mesh axis X), "
        "all_gather<float> of 8 elements, can never complete: world ranks {0} joined it but {2} "
        "returned without joining it. Is a collective inside rank-dependent control flow, e.g. "
        "`if (rank.world_rank() == 0)`?");
}

TEST_CASE("a collective all ranks but one call fails when that one returns, naming its number") {
  const auto start = std::chrono::steady_clock::now();
  const std::string what = message_of([] {
    tpx::spmd(tpx::host, tpx::Mesh<X>{3},
              [](auto& rank) {
                float x = 1, y = 0;
                rank.template group<X>().all_reduce(std::span<const float>(&x, 1),
                                                    std::span<float>(&y, 1));  // collective #1
                const auto t = tpx::randn<float, B<X>>(rank, {B(6)}, 1);
                if (rank.world_rank() != 1) (void)tpx::to_global(t);
              },
              {.timeout = std::chrono::seconds(300)});
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  INFO(what);
  CHECK(elapsed < std::chrono::seconds(10));
  // Ranks 0 and 2 fail alike; which of them had come when rank 1 returned varies.
  CHECK(what.starts_with(
      "tpx: rank 0 (X=0) failed: tpx: collective #2 on group {0,1,2} (mesh axis X), "
      "all_gather<float> of 6 elements, can never complete: world ranks {"));
  CHECK(what.find("} joined it but {1} returned without joining it") != std::string::npos);
  CHECK(what.ends_with("e.g. `if (rank.world_rank() == 0)`?"));
}

TEST_CASE("a collective some rank never joins while busy elsewhere times out, naming it") {
  std::latch others_failed(2);
  const std::string what = message_of([&] {
    tpx::spmd(tpx::host, tpx::Mesh<X>{3},
              [&](auto& rank) {
                if (rank.world_rank() == 1) {  // busy until the others have given up on it
                  others_failed.wait();
                  return;
                }
                float x = 1, y = 0;
                try {
                  rank.template group<X>().all_reduce(std::span<const float>(&x, 1),
                                                      std::span<float>(&y, 1));
                } catch (...) {
                  others_failed.count_down();
                  throw;
                }
              },
              {.timeout = std::chrono::milliseconds(200)});
  });
  INFO(what);
  CHECK(what.find("timed out after 200 ms") != std::string::npos);
  CHECK(what.find("world ranks {1} never arrived") != std::string::npos);
}

TEST_CASE("an axis the mesh lacks is named at run time") {
  const std::string what = message_of([] {
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [](auto& rank) {
      // With the typed rank this is a compile error; through its untyped context, a run-time one.
      const tpx::rank_context& untyped = rank;
      tpx::Tensor<float, B<Z>, D<>> t(untyped, {B(4), D(2)});
    });
  });
  CHECK(what.find("mesh axis Z is not an axis of the mesh (X=2, Y=1)") != std::string::npos);
}

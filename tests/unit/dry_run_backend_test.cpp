// The dry-run backend (spmd/dry_run.hpp) and its meta tensors (tensor/meta_space.hpp) on a typed
// program: each rank's tensors are counted on its memory meter at their shard's size and hold no
// host-readable values, its products count 2 m n k FLOPs each (worked out here from the shapes),
// ranks run one after another with their own coordinates, a rank that throws stops the run with
// the rank named, as the thread backend does, and a background task (tpx::in_background) runs at
// once with its collectives counted apart, as the background traffic, as the host launcher's
// communication thread counts them, and the rank's timeline records its work between each task's
// start and the wait for it.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <tpx/spmd/background.hpp>
#include <tpx/spmd/dry_run.hpp>
#include <tpx/tpx.hpp>
#include <vector>

namespace {

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, D, F);

template <class Tn>
concept host_readable = requires(Tn& t) { t.local(); };
static_assert(!host_readable<tpx::MetaTensor<float, B<X>, D<Y>>>,
              "a meta tensor has no values for the host to read");
static_assert(std::is_same_v<tpx::space_of_t<tpx::MetaRank<tpx::Mesh<X, Y>>&>, tpx::meta_space>);

}  // namespace

TEST_CASE("a dry run meters each rank's shards and counts its products' FLOPs") {
  std::vector<int> ranks_run;
  tpx::spmd(tpx::dry_run, tpx::Mesh<X, Y>{2, 3}, [&](auto& rank) {
    ranks_run.push_back(rank.world_rank());
    CHECK(rank.template coord<X>() == rank.world_rank() / 3);
    CHECK(rank.template coord<Y>() == rank.world_rank() % 3);
    // B = 8 over X: 4 rows; D = 12 over Y: 4 columns; F = 6 whole.
    auto in = tpx::randn<float, B<X>, D<Y>>(rank, {B(8), D(12)}, 1);
    CHECK(rank.memory().live_bytes() == 4 * 4 * 4);
    auto w = tpx::randn<float, D<Y>, F<>>(rank, {D(12), F(6)}, 2);
    CHECK(rank.memory().live_bytes() == (4 * 4 + 4 * 6) * 4);
    CHECK(tpx::dry_run_flops(rank) == 0);
    {
      const auto partial = tpx::matmul(in, w);  // a local [4, 4] x [4, 6] product, {U_Y}
      CHECK(tpx::dry_run_flops(rank) == 2.0 * 4 * 4 * 6);
      CHECK(rank.memory().live_bytes() == (4 * 4 + 4 * 6 + 4 * 6) * 4);
    }
    CHECK(rank.memory().live_bytes() == (4 * 4 + 4 * 6) * 4);
    CHECK(rank.memory().peak_bytes() == (4 * 4 + 4 * 6 + 4 * 6) * 4);
  });
  CHECK(ranks_run == std::vector<int>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("a dry run's rank that throws stops the run, named") {
  std::vector<int> ranks_run;
  const auto run = [&] {
    tpx::spmd(tpx::dry_run, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
      ranks_run.push_back(rank.world_rank());
      if (rank.world_rank() == 2) throw std::runtime_error("out of ideas");
    });
  };
  CHECK_THROWS_WITH_AS(run(), "tpx: rank 2 (X=1, Y=0) failed: out of ideas", tpx::spmd_error);
  CHECK(ranks_run == std::vector<int>{0, 1, 2});
}

TEST_CASE(
    "a dry run's background task runs at once, its collectives counted as background traffic") {
  using tpx::traffic_part;
  tpx::spmd(tpx::dry_run, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    auto w = tpx::randn<float, B<X>, D<>>(rank, {B(8), D(3)}, 1);  // 4 rows of 3 per rank of X
    auto gathered = tpx::in_background(rank, [&] {
      // A task started inside a task runs at once too, on the same background communicators.
      return tpx::in_background(rank, [&] { return tpx::all_gather<X>(w); }).get();
    });
    const auto over_x = [&](traffic_part part) {
      return rank.traffic_by_axes(part)[1].of(tpx::detail::CollectiveOp::all_gather);
    };
    // Run already: the gathered [8, 3] is counted, as background traffic only.
    CHECK(over_x(traffic_part::background) == tpx::traffic_count{1, 8 * 3 * 4, 8 * 3 * 4 / 2.0});
    CHECK(over_x(traffic_part::all) == over_x(traffic_part::background));
    CHECK(gathered.get().global_extent(0) == 8);
    tpx::all_gather<X>(w);  // on the rank's own thread: all of the traffic, not the background's
    CHECK(over_x(traffic_part::all).calls == 2);
    CHECK(over_x(traffic_part::background).calls == 1);
  });
}

TEST_CASE("a dry run's timeline: the rank's work between each task's start and the wait for it") {
  // Each rank: a product, a task gathering w over X, a product, the wait for it, its own gather
  // over X, a task started before the recording (not in it) and waited in it. Every figure below
  // is worked out from the shapes: a [4, 3] x [3, 5] product is 2 * 4 * 3 * 5 FLOPs; gathering
  // the [8, 3] fp32 w over 2 ranks puts 8 * 3 * 4 / 2 bytes on the rank's link.
  using kind = tpx::timeline_event::kind;
  tpx::spmd(tpx::dry_run, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    auto w = tpx::randn<float, B<X>, D<>>(rank, {B(8), D(3)}, 1);
    auto v = tpx::randn<float, D<>, F<>>(rank, {D(3), F(5)}, 2);
    auto earlier = tpx::in_background(rank, [&] { return tpx::all_gather<X>(w); });
    tpx::record_timeline(rank);
    const auto product = tpx::matmul(w, v);  // [4, 3] x [3, 5] on each rank
    auto gathered = tpx::in_background(rank, [&] {
      // A task inside a task runs in it: its traffic is the outer task's.
      return tpx::in_background(rank, [&] { return tpx::all_gather<X>(w); }).get();
    });
    const auto second = tpx::matmul(w, v);
    gathered.get();
    tpx::all_gather<X>(w);
    earlier.get();
    const std::vector<tpx::timeline_event> t = tpx::take_timeline(rank);
    const double flops = 2.0 * 4 * 3 * 5, link = 8 * 3 * 4 / 2.0;
    REQUIRE(t.size() == 5);
    CHECK(t[0].what == kind::work);
    CHECK(t[0].matrix_flops == flops);
    CHECK(tpx::link_bytes(t[0].traffic) == 0);
    CHECK(t[1].what == kind::start);
    CHECK(t[1].task == 0);
    REQUIRE(t[1].traffic.size() == 3);  // X, Y and X, Y: the sets of more than one rank
    CHECK(t[1].traffic[0].axes == "X");
    CHECK(t[1].traffic[0].traffic.total().link_bytes == link);
    CHECK(tpx::link_bytes(t[1].traffic) == link);
    CHECK(t[2].what == kind::work);
    CHECK(t[2].matrix_flops == flops);
    CHECK(tpx::link_bytes(t[2].traffic) == 0);
    CHECK(t[3].what == kind::wait);
    CHECK(t[3].task == 0);
    // Then its own gather, in the work take_timeline closes (the earlier task's wait is not in
    // the timeline).
    CHECK(t[4].what == kind::work);
    CHECK(t[4].matrix_flops == 0);
    CHECK(tpx::link_bytes(t[4].traffic) == link);
    CHECK(tpx::take_timeline(rank).empty());  // stopped
    // A task of one recording waited for in the next is in neither's waits; each recording
    // numbers its tasks from 0.
    tpx::record_timeline(rank);
    auto held = tpx::in_background(rank, [&] { return tpx::all_gather<X>(w); });
    CHECK(tpx::take_timeline(rank).size() == 1);  // its start
    tpx::record_timeline(rank);
    auto next = tpx::in_background(rank, [&] { return tpx::all_gather<X>(w); });
    held.get();
    next.get();
    const std::vector<tpx::timeline_event> later = tpx::take_timeline(rank);
    REQUIRE(later.size() == 2);
    CHECK(later[0].what == kind::start);
    CHECK(later[0].task == 0);
    CHECK(later[1].what == kind::wait);
    CHECK(later[1].task == 0);
  });
}

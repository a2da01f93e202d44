// What communicators count of their collectives (comm/collective_traffic.hpp, kept by
// any_communicator for every backend): per set of mesh axes, each operation's calls, data bytes
// and nccl-tests' bus bytes, checked against sizes worked out by hand from the tensors' shapes:
// the typed collectives and a matmul's plan on the thread backend, and the same program under
// tpx::dry_run (meta tensors, silent communicators), which must count the same. A group of one
// rank puts nothing on a link.
#include <doctest/doctest.h>

#include <cstdint>
#include <mutex>
#include <tpx/spmd/dry_run.hpp>
#include <tpx/tpx.hpp>
#include <vector>

namespace {

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, D, F);

using tpx::detail::CollectiveOp;

// Rank by rank, what the program below moved over X (mask 1), Y (mask 2) and both (mask 3).
template <class Launcher>
std::vector<std::vector<tpx::collective_traffic>> traffic_of_program(Launcher launcher) {
  std::vector<std::vector<tpx::collective_traffic>> ranks(4);
  std::mutex lock;
  tpx::spmd(launcher, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    auto in = tpx::randn<float, B<X>, D<Y>>(rank, {B(8), D(16)}, 1);   // [4, 8] per rank
    auto w = tpx::randn<float, D<X>, F<Y>>(rank, {D(16), F(12)}, 2);   // [8, 6] per rank
    auto out = tpx::matmul(in, w);  // AllGather<Y>(lhs, D); AllGather<X>(rhs, D); GEMM
    static_assert(std::is_same_v<decltype(out), tpx::rank_tensor_t<decltype(rank), float, B<X>, F<Y>>>);
    auto partial = tpx::matmul(in, tpx::randn<float, D<Y>, F<>>(rank, {D(16), F(12)}, 3));  // {U_Y}
    auto whole = tpx::all_reduce<Y>(partial);  // [4, 12] per rank
    rank.template group<X, Y>().barrier();
    const std::lock_guard<std::mutex> guard(lock);
    ranks[rank.world_rank()] = rank.traffic_by_axes();
  });
  return ranks;
}

void check_program_traffic(const std::vector<std::vector<tpx::collective_traffic>>& ranks) {
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    REQUIRE(ranks[r].size() == 4);
    const tpx::collective_traffic &x = ranks[r][1], &y = ranks[r][2], &xy = ranks[r][3];
    // Over Y: the lhs gathered to [4, 16] floats; then the partial [4, 12] summed.
    CHECK(y.of(CollectiveOp::all_gather) == tpx::traffic_count{1, 4 * 16 * 4, 4 * 16 * 4 / 2.0});
    CHECK(y.of(CollectiveOp::all_reduce) == tpx::traffic_count{1, 4 * 12 * 4, 4 * 12 * 4 * 2 * 0.5});
    // Over X: the rhs gathered to [16, 6].
    CHECK(x.of(CollectiveOp::all_gather) == tpx::traffic_count{1, 16 * 6 * 4, 16 * 6 * 4 / 2.0});
    CHECK(x.of(CollectiveOp::all_reduce).calls == 0);
    CHECK(x.of(CollectiveOp::reduce_scatter).calls == 0);
    // The barrier of all four: a call, no bytes.
    CHECK(xy.of(CollectiveOp::barrier) == tpx::traffic_count{1, 0, 0});
    CHECK(xy.total() == tpx::traffic_count{1, 0, 0});
  }
}

}  // namespace

TEST_CASE("the thread backend's communicators count what the typed program moves") {
  check_program_traffic(traffic_of_program(tpx::host));
}

TEST_CASE("a dry run counts what the thread backend's run moves") {
  const auto real = traffic_of_program(tpx::host);
  const auto dry = traffic_of_program(tpx::dry_run);
  check_program_traffic(dry);
  CHECK(dry == real);
}

TEST_CASE("bus factors are nccl-tests', and a group of one rank puts nothing on a link") {
  using T = tpx::collective_traffic;
  CHECK(T::bus_factor(CollectiveOp::all_gather, 4) == 0.75);
  CHECK(T::bus_factor(CollectiveOp::reduce_scatter, 4) == 0.75);
  CHECK(T::bus_factor(CollectiveOp::all_to_all, 4) == 0.75);
  CHECK(T::bus_factor(CollectiveOp::all_reduce, 4) == 1.5);
  CHECK(T::bus_factor(CollectiveOp::broadcast, 4) == 1);
  CHECK(T::bus_factor(CollectiveOp::barrier, 4) == 0);
  for (CollectiveOp op : T::operations) CHECK(T::bus_factor(op, 1) == 0);

  // An lvalue gathered over an axis of one rank still calls its communicator, which counts it.
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 2}, [&](auto& rank) {
    const auto t = tpx::randn<float, B<X>, D<>>(rank, {B(8), D(2)}, 1);
    const auto g = tpx::all_gather<X>(t);
    CHECK(rank.traffic_by_axes()[1].of(CollectiveOp::all_gather) == tpx::traffic_count{1, 8 * 2 * 4, 0});
    CHECK(g.size() == 16);
  });
}

TEST_CASE("traffic by axis names lists the sets of axes whose groups hold more than one rank") {
  // On a 1x2 mesh only Y's groups and the whole mesh's ("X, Y") have two ranks; X's have one.
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 2}, [&](auto& rank) {
    const std::vector<tpx::axes_traffic> before = rank.traffic_by_axis_names();
    const auto t = tpx::randn<float, B<Y>, D<>>(rank, {B(8), D(2)}, 1);  // [4, 2] per rank
    const auto g = tpx::all_gather<Y>(t);
    rank.template group<X, Y>().barrier();
    const std::vector<tpx::axes_traffic> moved = tpx::traffic_since(rank.traffic_by_axis_names(), before);
    REQUIRE(moved.size() == 2);
    CHECK(moved[0].axes == "Y");
    CHECK(moved[0].traffic.of(CollectiveOp::all_gather) == tpx::traffic_count{1, 8 * 2 * 4, 8 * 2 * 4 / 2.0});
    CHECK(moved[1].axes == "X, Y");
    CHECK(moved[1].traffic.total() == tpx::traffic_count{1, 0, 0});
    CHECK(g.size() == 16);
  });
}

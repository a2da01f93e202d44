// The cost model prices what tpx runs: predict_layer's bus bytes, collectives and FLOPs per
// device for a step of the notes' MLP layer (cost/mlp.hpp) are what the step itself
// (tpx::cost::mlp::run_step, cost/mlp_step.hpp: the plans' collectives through the typed
// collectives, and the local GEMMs) moves and computes on every rank, counted by a dry run
// (tpx::spmd(tpx::dry_run, ...): meta tensors, communicators that only count, so a layer of the
// notes' Llama-like shape, 4M tokens by 8192 by 28672, runs here without memory). Each layout
// on the meshes users choose between for 8 devices, and one with an axis of a single rank,
// whose collectives put nothing on a link. Tolerance 1e-12 relative: both sides sum the same
// byte counts in a different order.
#include <doctest/doctest.h>

#include <string>
#include <tpx/cost/mlp_step.hpp>
#include <tpx/spmd/dry_run.hpp>

namespace {

using namespace tpx::cost;
using namespace tpx::cost::mlp;

constexpr shape llama_like{.batch = 4194304, .d_model = 8192, .d_ff = 28672};
constexpr double fp32_bytes = 4;

// What rank r of a dry run of one step moved and computed.
struct counted {
  double link_bytes = 0;
  std::int64_t collectives = 0;
  double flops = 0;
};

template <class Layout>
std::vector<counted> dry_run_step(int x, int y, shape s) {
  std::vector<counted> ranks(static_cast<std::size_t>(x * y));
  tpx::spmd(tpx::dry_run, mesh{x, y}, [&](auto& rank) {
    using space = tpx::space_of_t<std::remove_cvref_t<decltype(rank)>>;
    const auto b = static_cast<std::int64_t>(s.batch), d = static_cast<std::int64_t>(s.d_model),
               f = static_cast<std::int64_t>(s.d_ff);
    const in_space_t<space, typename Layout::in> in(rank, {B(b), D(d)});
    const in_space_t<space, typename Layout::w_in> w_in(rank, {D(d), F(f)});
    const in_space_t<space, typename Layout::w_out> w_out(rank, {F(f), D(d)});
    run_step<Layout, space>(in, w_in, w_out, run_directly);
    counted& c = ranks[static_cast<std::size_t>(rank.world_rank())];
    for (const tpx::axes_traffic& axes : rank.traffic_by_axis_names()) {
      const tpx::traffic_count total = axes.traffic.total();
      c.link_bytes += total.link_bytes;
      c.collectives += total.calls;
    }
    c.flops = tpx::dry_run_flops(rank);
  });
  return ranks;
}

template <class Layout>
void check_prices_the_step(const char* name, int x, int y) {
  INFO(name << " on " << x << "x" << y);
  const cluster<mesh> sys{mesh{x, y}, h100_sxm, {1, 1}, /*price_packing=*/false};
  const op_estimate predicted = predict_layer<Layout>(sys, llama_like, fp32_bytes).step();
  const std::vector<counted> ranks = dry_run_step<Layout>(x, y, llama_like);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    INFO("rank " << r);
    CHECK(ranks[r].link_bytes == doctest::Approx(predicted.comm.bus_bytes).epsilon(1e-12));
    CHECK(ranks[r].collectives == predicted.comm.collectives);
    CHECK(ranks[r].flops == doctest::Approx(predicted.flops).epsilon(1e-12));
  }
}

}  // namespace

TEST_CASE("the cost model's bus bytes, collectives and FLOPs are what a dry run of the step counts") {
  check_prices_the_step<dp>("dp", 8, 1);
  check_prices_the_step<fsdp>("fsdp", 8, 1);
  check_prices_the_step<tp>("tp", 1, 8);
  for (const auto& [x, y] : {std::pair{4, 2}, std::pair{2, 4}, std::pair{8, 1}, std::pair{1, 8}})
    check_prices_the_step<fsdp_tp>("fsdp_tp", x, y);
}

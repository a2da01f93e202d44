// The GPT example's model (examples/gpt/model.hpp) computes the same thing on every mesh, and its
// backward pass is the gradient of its loss:
//  - on meshes 2x1, 1x2, 2x2, 4x1, 1x4 and 3x2 the loss and every parameter's gradient equal the
//    unsharded 1x1 run's (relative 1e-5 for the loss, 1e-4 of the largest element for each
//    gradient: sharded runs sum partial products in other orders); extents chosen so that heads,
//    positions and widths split unevenly;
//  - for every parameter tensor, <grad, v> along a random direction v matches the central
//    difference of the loss, on 1x1 and 2x2 (directional_check.hpp: tolerances there);
//  - 20 AdamW steps on 2x2 and 1x4 follow the 1x1 run's losses (relative 1e-4), which fall.
#include <doctest/doctest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <tpx/nn/adamw.hpp>
#include <tpx/nn/global_norm.hpp>
#include <vector>

#include "../../examples/gpt/model.hpp"
#include "directional_check.hpp"

namespace {

const char* text = "/usr/share/common-licenses/GPL-3";

gpt::config tiny() {
  gpt::config c;
  c.batch = 4;
  c.seq = 6;
  c.heads = 3;
  c.head_dim = 4;  // D = 12
  c.ffn = 10;
  c.layers = 2;
  return c;
}

// The loss and every gradient, as global arrays in parameter order, from rank 0 of a mesh.
struct run_result {
  float loss = 0;
  std::vector<std::string> names;
  std::vector<std::vector<float>> grads;
};

run_result gradients(int mx, int my) {
  const gpt::config c = tiny();
  const trainer::text_data data(text, static_cast<int>(c.seq));
  run_result out;
  std::mutex m;
  tpx::spmd(tpx::host, tpx::Mesh<gpt::X, gpt::Y>{mx, my}, [&](auto& rank) {
    gpt::model_tensors params(rank, c), grads(rank, c);
    gpt::initialize(params, c);
    const gpt::model<float> net(rank, c);
    const auto loss =
        net.forward_backward(params, gpt::load_batch<tpx::host_space>(rank, data, c, 0), grads);
    run_result r{tpx::scalar_on_host(loss), {}, {}};
    grads.for_each([&](const std::string& name, const auto& g) {
      r.names.push_back(name);
      r.grads.push_back(tpx::to_global(g));
    });
    if (rank.world_rank() == 0) {
      std::lock_guard lock(m);
      out = std::move(r);
    }
  });
  return out;
}

}  // namespace

TEST_CASE("GPT with FSDP over X and tensor + sequence parallelism over Y follows the 1x1 run") {
  const run_result want = gradients(1, 1);
  REQUIRE(want.grads.size() == 2 + 8 * 2 + 2);
  for (const auto& [mx_, my_] :
       std::vector<std::pair<int, int>>{{2, 1}, {1, 2}, {2, 2}, {4, 1}, {1, 4}, {3, 2}}) {
    const int mx = mx_, my = my_;  // clang before 16 cannot capture bindings in lambdas
    CAPTURE(mx);
    CAPTURE(my);
    const run_result got = gradients(mx, my);
    CHECK(std::abs(got.loss - want.loss) <= 1e-5f * std::abs(want.loss));
    REQUIRE(got.grads.size() == want.grads.size());
    for (std::size_t t = 0; t < want.grads.size(); ++t) {
      REQUIRE(got.grads[t].size() == want.grads[t].size());
      double scale = 0, worst = 0;
      for (float v : want.grads[t]) scale = std::max(scale, double(std::abs(v)));
      for (std::size_t i = 0; i < want.grads[t].size(); ++i)
        worst = std::max(worst, double(std::abs(got.grads[t][i] - want.grads[t][i])));
      INFO(want.names[t] << ": worst difference " << worst << " of " << scale);
      CHECK(worst <= 1e-4 * scale);
      CHECK(scale > 0);  // every parameter receives a gradient
    }
  }
}

TEST_CASE("GPT's sharded backward pass is the gradient of its loss") {
  const gpt::config c = tiny();
  const trainer::text_data data(text, static_cast<int>(c.seq));
  for (const auto& [mx_, my_] : std::vector<std::pair<int, int>>{{1, 1}, {2, 2}}) {
    const int mx = mx_, my = my_;
    CAPTURE(mx);
    CAPTURE(my);
    trainer_test::directional_check check;
    tpx::spmd(tpx::host, tpx::Mesh<gpt::X, gpt::Y>{mx, my}, [&](auto& rank) {
      gpt::model_tensors params(rank, c), grads(rank, c), scratch(rank, c);
      gpt::initialize(params, c);
      const gpt::model<float> net(rank, c);
      const auto tokens = gpt::load_batch<tpx::host_space>(rank, data, c, 0);
      net.forward_backward(params, tokens, grads);
      check.run(rank, params, grads,
                [&] { return tpx::scalar_on_host(net.forward_backward(params, tokens, scratch)); });
    });
    CHECK(check.checked == 2 + 8 * 2 + 2);
    for (const auto& m : check.mismatches) FAIL_CHECK(m);
  }
}

TEST_CASE("GPT training with AdamW on 2x2 and 1x4 follows the 1x1 losses, which fall") {
  const gpt::config c = tiny();
  const trainer::text_data data(text, static_cast<int>(c.seq));
  auto losses = [&](int mx, int my) {
    std::vector<float> out;
    tpx::spmd(tpx::host, tpx::Mesh<gpt::X, gpt::Y>{mx, my}, [&](auto& rank) {
      gpt::model_tensors params(rank, c), grads(rank, c), m(rank, c), v(rank, c);
      gpt::initialize(params, c);
      const gpt::model<float> net(rank, c);
      const tpx::nn::adamw_config adam{1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f};
      tpx::Tensor<float> unscaled(rank, {});
      tpx::fill_with(unscaled, [](std::int64_t) { return 1.0f; });
      for (int step = 0; step < 20; ++step) {
        const auto loss = net.forward_backward(
            params, gpt::load_batch<tpx::host_space>(rank, data, c, step), grads);
        params.for_each(
            [&](const std::string&, auto& p, auto& g, auto& pm, auto& pv) {
              tpx::nn::adamw_step(p, g, pm, pv, adam, step + 1, unscaled);
            },
            grads, m, v);
        const float l = tpx::scalar_on_host(loss);
        if (rank.world_rank() == 0) out.push_back(l);
      }
    });
    return out;
  };
  const std::vector<float> want = losses(1, 1);
  REQUIRE(want.size() == 20);
  CHECK(want.back() < want.front() - 0.5f);
  for (const auto& [mx_, my_] : std::vector<std::pair<int, int>>{{2, 2}, {1, 4}}) {
    const int mx = mx_, my = my_;
    CAPTURE(mx);
    CAPTURE(my);
    const std::vector<float> got = losses(mx, my);
    REQUIRE(got.size() == want.size());
    float worst = 0;
    for (std::size_t s = 0; s < got.size(); ++s)
      worst = std::max(worst, std::abs(got[s] - want[s]) / want[s]);
    INFO("worst relative loss difference " << worst);
    CHECK(worst <= 1e-4f);
  }
}

// HSDP in the GPT example (examples/gpt/model.hpp): a replica axis R beside FSDP over X and tensor
// + sequence parallelism over Y. Each replica holds the same shards of every parameter and trains
// on its 1/R of the batch; the gradients, partial sums over R, are all-reduced over R. The
// one-rank run is the reference, as in gpt_test.cpp:
//  - one forward and backward pass on 2x2x2, 2x1x1 and 3x2x1 (a batch of 4 over 3 replicas and 2
//    FSDP ranks: uneven, some ranks with no rows at all) gives the 1x1 run's loss (1e-5 relative)
//    and every gradient (1e-4 of its largest element);
//  - 30 steps of the shared trainer on 2x2x2 and 2x1x2, with and without activation
//    checkpointing, follow the 1x1 run's losses (1e-4 relative);
//  - checkpoints reshard across R: 10 steps on 2x2x2, resumed for 10 on 1x1, resumed for 10 on
//    2x2x2 again, follow the uninterrupted 1x1 run's 30 losses (1e-4 relative), and every tensor
//    of the 2x2x2 checkpoints is stored once (its blocks' volumes add up to the tensor's), not
//    once per replica.
#include <doctest/doctest.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpt_test_support.hpp"

using gpt_test::gradients;
using gpt_test::losses;
using gpt_test::training;
using gpt_test::worst_relative_difference;

TEST_CASE("GPT with replicas over R (HSDP) has the 1x1 run's loss and gradients") {
  const gpt_test::run_result want = gradients({1, 1, 1});
  for (const gpt::mesh& mesh : {gpt::mesh{2, 2, 2}, gpt::mesh{2, 1, 1}, gpt::mesh{3, 2, 1}}) {
    CAPTURE(mesh.to_string());
    const auto d = gpt_test::differences(gradients(mesh), want, 1e-5, 1e-4);
    CHECK_MESSAGE(d.empty(), gpt_test::joined(d));
  }
}

TEST_CASE("GPT training with HSDP on 2x2x2 and 2x1x2 follows the 1x1 losses") {
  const std::vector<float> want = losses(training(1, 1, 1));
  REQUIRE(want.size() == 30);
  for (int every : {0, 1}) {
    for (const auto& [r_, x_, y_] : {std::array{2, 2, 2}, std::array{2, 1, 2}}) {
      const int r = r_, x = x_, y = y_;  // clang before 16 cannot capture bindings in lambdas
      CAPTURE(r);
      CAPTURE(x);
      CAPTURE(y);
      CAPTURE(every);
      const float worst = worst_relative_difference(losses(training(r, x, y, every)), want);
      INFO("worst relative loss difference " << worst);
      CHECK(worst <= 1e-4f);
    }
  }
}

namespace {

// The sum over a checkpoint's tensors of (elements in its blocks) - (elements in the tensor):
// 0 when each element is stored once.
std::int64_t elements_stored_twice(const std::filesystem::path& step_folder) {
  std::ifstream in(step_folder / "manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(in);
  std::int64_t surplus = 0;
  for (const auto& [name, tensor] : manifest.at("tensors").items()) {
    std::int64_t whole = 1;
    for (const auto& extent : tensor.at("global_shape")) whole *= extent.get<std::int64_t>();
    surplus -= whole;
    for (const auto& block : tensor.at("blocks")) {
      std::int64_t stored = 1;
      for (const auto& extent : block.at("extents")) stored *= extent.get<std::int64_t>();
      surplus += stored;
    }
  }
  return surplus;
}

}  // namespace

TEST_CASE("GPT checkpoints saved on 2x2x2 resume on 1x1 and back, following the 1x1 losses") {
  const std::vector<float> want = losses(training(1, 1, 1));
  const auto dir =
      std::filesystem::temp_directory_path() / ("tpx-gpt-hsdp-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::vector<float> got;
  for (const auto& [r_, x_, y_, steps_] :
       {std::array{2, 2, 2, 10}, std::array{1, 1, 1, 20}, std::array{2, 2, 2, 30}}) {
    const int r = r_, x = x_, y = y_, steps = steps_;  // clang before 16: no bindings in lambdas
    trainer::run_options<gpt::family> o = training(r, x, y);
    o.steps = steps;
    o.ckpt_dir = dir.string();
    o.resume = steps > 10;
    const std::vector<float> part = losses(o);
    CHECK(part.size() == 10);
    got.insert(got.end(), part.begin(), part.end());
    if (r == 2) CHECK(elements_stored_twice(tpx::io::step_folder(dir, steps)) == 0);
  }
  const float worst = worst_relative_difference(got, want);
  INFO("worst relative loss difference " << worst);
  CHECK(worst <= 1e-4f);
  std::filesystem::remove_all(dir);
}

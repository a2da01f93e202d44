// tpx-train --pipeline's training runs (examples/trainer/pipelined_family.hpp through the shared
// loop, training.hpp): the losses of every step of a run on P x X x Y ranks follow the unsharded
// run of the same model on one rank (tpx-train --mesh 1x1), within fp32 tolerance (relative
// 1e-5 over 20 steps: the pipeline adds its microbatches' gradients, and its sharded products
// sum in another order, which Adam carries forward; measured at most 2.6e-7). In every schedule
// on 2 stages, and with FSDP and tensor parallelism inside the stages (2x2x2, uneven shards), on
// 4 stages, and in bf16 (within 2%, as mesh_equivalence_test's bf16 run; measured 0.08%).
// Activation checkpointing within the pieces (every 1 and every 3 of 4 blocks per piece) gives
// the same losses to the bit, in 1F1B, zero-bubble and interleaved. FSDP's collectives run once
// per step by default and in every pass with --fsdp-per-pass: both follow the one-rank run. The
// passes between stages in the background (--overlap on) give the same losses to the bit.
// Checkpoints: a run stopped and resumed on its own layout continues bit for bit; its checkpoint
// resumes on 4 stages of another schedule and in tpx-train without stages, and a checkpoint of
// tpx-train without stages resumes on 2 stages, each within 1e-5 of the run that went on.
#include <doctest/doctest.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer_test_support.hpp"

namespace {

using trainer::pipelined_mlp;
using trainer_test::pipelined;
using trainer_test::worst_relative_difference;

std::vector<float> losses(const trainer::run_options<pipelined_mlp>& o) {
  std::vector<float> out;
  trainer::run(o, [&](const trainer::step_report& r) { out.push_back(r.loss); });
  return out;
}

std::vector<float> reference_losses(bool bf16 = false) {
  trainer::options whole = trainer_test::small(1, 1);
  whole.steps = 20;
  whole.bf16 = bf16;
  return trainer_test::losses(whole);
}

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tpx-pipelined-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("a pipelined run follows the run on one rank, in every schedule and on 2x2x2 and 4x1x1") {
  const std::vector<float> reference = reference_losses();
  REQUIRE(reference.size() == 20);
  CHECK(reference.back() < reference.front() - 0.5f);  // it learns
  struct layout {
    int stages, x, y;
    const char* schedule;
  };
  for (const layout& l :
       {layout{2, 1, 1, "gpipe"}, layout{2, 1, 1, "1f1b"}, layout{2, 1, 1, "zero-bubble"},
        layout{2, 1, 1, "interleaved"}, layout{2, 1, 1, "zero-bubble-v"}, layout{2, 2, 2, "1f1b"},
        layout{2, 2, 2, "zero-bubble-v"}, layout{4, 1, 1, "1f1b"}}) {
    const std::vector<float> got = losses(pipelined(l.stages, l.x, l.y, l.schedule));
    REQUIRE(got.size() == reference.size());
    const float worst = worst_relative_difference(got, reference);
    INFO(l.stages << " stages of " << l.x << "x" << l.y << ", " << std::string(l.schedule)
                  << ": worst relative loss difference " << worst);
    CHECK(worst <= 1e-5f);
  }
}

TEST_CASE("a pipelined run in bf16 follows the fp32 run on one rank") {
  const std::vector<float> reference = reference_losses();
  auto o = pipelined(2, 2, 1, "1f1b");
  o.bf16 = true;
  const std::vector<float> got = losses(o);
  REQUIRE(got.size() == reference.size());
  const float worst = worst_relative_difference(got, reference);
  INFO("worst relative difference " << worst);
  CHECK(worst <= 0.02f);
  CHECK(worst > 0.0f);  // it did compute in bf16
}

TEST_CASE("activation checkpointing within the pieces changes no bit of a pipelined run") {
  // 8 layers: 4 blocks per piece on 2 stages (2 under interleaved), so every 3 leaves a segment
  // shorter than the rest; zero-bubble keeps the recomputed states for its weight steps.
  for (const char* schedule : {"1f1b", "zero-bubble", "interleaved"}) {
    CAPTURE(std::string(schedule));
    auto o = pipelined(2, 2, 2, schedule);
    o.model.layers = 8;
    o.steps = 10;
    const std::vector<float> plain = losses(o);
    for (const int every : {1, 3}) {
      CAPTURE(every);
      o.model.checkpoint_every = every;
      CHECK(losses(o) == plain);
    }
  }
}

TEST_CASE("the passes between stages in the background (--overlap on) change no bit of a run") {
  // Each tick's passes on the ranks' communication threads (nn::pipeline_passes::in_background)
  // move the same blocks as the passes at the end of each tick: the same losses, in 1F1B, in the
  // interleaved order and in the V, with FSDP and TP inside the stages.
  for (const char* schedule : {"1f1b", "interleaved", "zero-bubble-v"}) {
    CAPTURE(std::string(schedule));
    auto o = pipelined(2, 2, 2, schedule);
    o.steps = 10;
    const std::vector<float> in_step = losses(o);
    o.model.overlap = true;
    CHECK(losses(o) == in_step);
  }
}

TEST_CASE("FSDP's collectives in every pass (--fsdp-per-pass) follow the run on one rank too") {
  const std::vector<float> reference = reference_losses();
  for (const char* schedule : {"1f1b", "zero-bubble-v"}) {
    auto o = pipelined(2, 2, 2, schedule);
    o.model.fsdp_per_pass = true;
    const std::vector<float> got = losses(o);
    REQUIRE(got.size() == reference.size());
    const float worst = worst_relative_difference(got, reference);
    INFO(std::string(schedule) << ": worst relative loss difference " << worst);
    CHECK(worst <= 1e-5f);
  }
}

TEST_CASE("a pipelined run resumes on its layout, on other stage counts and without stages") {
  auto whole = pipelined(2, 2, 1, "interleaved");
  whole.ckpt_dir = fresh_dir("whole").string();
  const std::vector<float> uninterrupted = losses(whole);
  const std::vector<float> last_ten(uninterrupted.begin() + 10, uninterrupted.end());

  auto split = whole;
  split.ckpt_dir = fresh_dir("split").string();
  split.steps = 10;
  const std::vector<float> first = losses(split);
  CHECK(first == std::vector<float>(uninterrupted.begin(), uninterrupted.begin() + 10));
  const auto copy_of = [&](const std::string& name) {
    const std::string dir = fresh_dir(name).string();
    std::filesystem::copy(split.ckpt_dir, dir, std::filesystem::copy_options::recursive);
    return dir;
  };
  const std::string on_four = copy_of("four"), unstaged = copy_of("unstaged");

  split.steps = 20;
  split.resume = true;
  CHECK(losses(split) == last_ten);  // the same layout: bit for bit

  auto four = split;  // 4 stages of 1x1, another schedule
  four.ckpt_dir = on_four;
  four.model.stages = 4;
  four.model.schedule = "1f1b";
  four.mesh_x = 1;
  const std::vector<float> after_four = losses(four);
  REQUIRE(after_four.size() == 10);
  CHECK(worst_relative_difference(after_four, last_ten) <= 1e-5f);

  trainer::options plain = trainer_test::small(2, 1);  // tpx-train without --pipeline
  plain.steps = 20;
  plain.resume = true;
  plain.ckpt_dir = unstaged;
  const std::vector<float> after_plain = trainer_test::losses(plain);
  REQUIRE(after_plain.size() == 10);
  CHECK(worst_relative_difference(after_plain, last_ten) <= 1e-5f);

  // And back: a checkpoint of the model without stages resumes on 2 stages of the V.
  trainer::options unpipelined = trainer_test::small(1, 2);
  unpipelined.steps = 10;
  unpipelined.ckpt_dir = fresh_dir("unpipelined").string();
  trainer_test::losses(unpipelined);
  auto staged = pipelined(2, 1, 1, "zero-bubble-v");
  staged.resume = true;
  staged.ckpt_dir = unpipelined.ckpt_dir;
  const std::vector<float> after_staged = losses(staged);
  REQUIRE(after_staged.size() == 10);
  CHECK(worst_relative_difference(after_staged, last_ten) <= 1e-5f);

  for (const std::string& dir :
       {whole.ckpt_dir, split.ckpt_dir, on_four, unstaged, unpipelined.ckpt_dir})
    std::filesystem::remove_all(dir);
}

// Checkpoints of the example trainer:
//  - resume: 40 steps in one go, or 20 steps, stop, resume, 20 more: the losses of steps 20..39
//    and the final weights and Adam moments are bit-identical;
//  - reshard: a checkpoint saved on a 2x2 mesh loads onto 4x1 and 1x1 meshes with bit-identical
//    global weights and moments, and training continues there with the losses of the 2x2 run
//    within fp32 tolerance (1e-5 relative: other meshes sum in another order).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "trainer_checkpoints.hpp"

namespace {

using namespace trainer;
using trainer_test::load_global;

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tpx-trainer-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

std::vector<float> tail(const std::vector<float>& v, std::size_t from) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from), v.end()};
}

}  // namespace

TEST_CASE("stop and resume continues bit-exactly on the same mesh") {
  options whole = trainer_test::small(2, 2);
  whole.steps = 40;
  whole.ckpt_dir = fresh_dir("whole").string();
  const std::vector<float> uninterrupted = trainer_test::losses(whole);

  options split = whole;
  split.ckpt_dir = fresh_dir("split").string();
  split.steps = 20;
  const std::vector<float> first = trainer_test::losses(split);
  split.steps = 40;
  split.resume = true;
  const std::vector<float> second = trainer_test::losses(split);

  CHECK(first == std::vector<float>(uninterrupted.begin(), uninterrupted.begin() + 20));
  REQUIRE(second.size() == 20);
  CHECK(second == tail(uninterrupted, 20));
  CHECK(load_global(whole, 1, 1, 40) == load_global(split, 1, 1, 40));
  std::filesystem::remove_all(whole.ckpt_dir);
  std::filesystem::remove_all(split.ckpt_dir);
}

TEST_CASE("a checkpoint saved on 2x2 resumes on 4x1 and on 1x1") {
  options saved = trainer_test::small(2, 2);
  saved.ckpt_dir = fresh_dir("reshard").string();
  saved.steps = 20;
  trainer_test::losses(saved);
  const auto weights = load_global(saved, 2, 2, 20);
  CHECK(weights.size() == 3 * (2 + 3 * 4 + 2));
  options continued = saved;
  continued.steps = 40;
  continued.resume = true;
  continued.save_every = 1000;  // only the final step is saved: step 20 stays as it is
  options reference_dir = continued;
  reference_dir.ckpt_dir = fresh_dir("reshard-reference").string();
  std::filesystem::copy(saved.ckpt_dir, reference_dir.ckpt_dir,
                        std::filesystem::copy_options::recursive);
  const std::vector<float> on_2x2 = trainer_test::losses(reference_dir);
  REQUIRE(on_2x2.size() == 20);
  for (const auto& values : {std::pair{4, 1}, std::pair{1, 1}}) {
    // plain variables, not bindings: clang before 16 cannot capture bindings in lambdas
    const int x = std::get<0>(values), y = std::get<1>(values);
    INFO("resumed on " << x << "x" << y);
    CHECK(load_global(saved, x, y, 20) == weights);
    options there = continued;
    there.mesh_x = x;
    there.mesh_y = y;
    there.ckpt_dir = fresh_dir("reshard-" + std::to_string(x) + "x" + std::to_string(y)).string();
    std::filesystem::copy(saved.ckpt_dir, there.ckpt_dir, std::filesystem::copy_options::recursive);
    CHECK(trainer_test::worst_relative_difference(trainer_test::losses(there), on_2x2) <= 1e-5f);
    std::filesystem::remove_all(there.ckpt_dir);
  }
  std::filesystem::remove_all(saved.ckpt_dir);
  std::filesystem::remove_all(reference_dir.ckpt_dir);
}

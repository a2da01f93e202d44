// The example trainer computes the same training run on every mesh: the losses of the first 50
// steps on meshes 2x1, 1x2, 2x2 and 4x2 equal those of the unsharded 1x1 run within fp32
// tolerance (relative 1e-5: sharded runs sum partial products in another order, and Adam
// carries those rounding differences forward), with and without activation checkpointing
// (every 2 blocks; recomputation must not change the numbers at all on one mesh); and FSDP's
// collectives in background tasks (--overlap on) change no bit of a run.
#include <doctest/doctest.h>

#include <cmath>

#include "trainer_test_support.hpp"

TEST_CASE("FSDP+TP training on any mesh follows the unsharded run") {
  const std::vector<float> reference = trainer_test::losses(trainer_test::small(1, 1));
  REQUIRE(reference.size() == 50);
  CHECK(reference.back() < reference.front() - 1.0f);  // it learns
  for (int every : {0, 2}) {
    for (const auto& values : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}, std::pair{4, 2}}) {
      // plain variables, not bindings: clang before 16 cannot capture bindings in lambdas
      const int x = std::get<0>(values), y = std::get<1>(values);
      const std::vector<float> got = trainer_test::losses(trainer_test::small(x, y, every));
      REQUIRE(got.size() == reference.size());
      float worst = 0;
      for (std::size_t s = 0; s < got.size(); ++s)
        worst = std::max(worst, std::abs(got[s] - reference[s]) / std::abs(reference[s]));
      INFO("mesh " << x << "x" << y << ", checkpoint every " << every
                   << ": worst relative loss difference " << worst);
      CHECK(worst <= 1e-5f);
    }
  }
}

TEST_CASE("activation checkpointing does not change a single bit") {
  for (const auto& values : {std::pair{1, 1}, std::pair{2, 2}}) {
    const int x = std::get<0>(values), y = std::get<1>(values);
    const std::vector<float> plain = trainer_test::losses(trainer_test::small(x, y, 0));
    for (int every : {1, 2, 3})
      CHECK(trainer_test::losses(trainer_test::small(x, y, every)) == plain);
  }
}

TEST_CASE("bf16 compute follows the fp32 run") {
  // bf16 keeps 8 bits of mantissa: the losses drift from fp32's by rounding, not by a different
  // computation, so they stay within 2% over 50 steps (measured: about 0.1%).
  const std::vector<float> fp32 = trainer_test::losses(trainer_test::small(2, 2));
  auto o = trainer_test::small(2, 2);
  o.bf16 = true;
  const std::vector<float> bf16 = trainer_test::losses(o);
  REQUIRE(bf16.size() == fp32.size());
  float worst = 0;
  for (std::size_t s = 0; s < fp32.size(); ++s)
    worst = std::max(worst, std::abs(bf16[s] - fp32[s]) / fp32[s]);
  INFO("worst relative difference " << worst);
  CHECK(worst <= 0.02f);
  CHECK(bf16 != fp32);  // it did compute in bf16
}

TEST_CASE("FSDP's collectives in the background (--overlap on) change no bit of a run") {
  // Each block's weights gathered a visit ahead and its gradients reduce-scattered while the next
  // block's backward pass runs, on the ranks' communication threads: the same operations on the
  // same data as without, so the same losses to the bit, with checkpointing (whose recomputation
  // visits the blocks again) and in bf16.
  struct layout {
    int x, y, every;
    bool bf16;
  };
  for (const layout& l : {layout{2, 2, 0, false}, layout{2, 2, 2, true}, layout{4, 1, 2, false},
                          layout{1, 2, 0, false}}) {
    INFO("mesh " << l.x << "x" << l.y << ", checkpoint every " << l.every
                 << (l.bf16 ? ", bf16" : ""));
    auto o = trainer_test::small(l.x, l.y, l.every);
    o.bf16 = l.bf16;
    o.steps = 20;
    const std::vector<float> in_turn = trainer_test::losses(o);
    o.model.overlap = true;
    CHECK(trainer_test::losses(o) == in_turn);
  }
}

// The training step in the form a CUDA graph records (examples/trainer/recorded_training.hpp,
// run_options::cuda_graph: the batch copied into the same tensors, AdamW's step number read from
// a scalar the step advances, the gradients made inside the step, the loss and gradient norm
// assigned into fixed scalars) trains exactly as train_step does. The host records nothing and
// runs that form of the step as written, so on the host the two runs' losses are equal bit for
// bit: the MLP trainer over 30 steps and the GPT example over 10, on a mesh of one rank. A mesh of
// more ranks is refused with the reason. On a GPU, tests/cuda/trainer_test.cu replays the
// recording itself.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "gpt_test_support.hpp"
#include "trainer_test_support.hpp"

TEST_CASE("recorded training: the MLP trainer's losses equal train_step's, bit for bit") {
  trainer::options o = trainer_test::small(1, 1);
  o.steps = 30;
  const std::vector<float> plain = trainer_test::losses(o);
  o.cuda_graph = true;
  const std::vector<float> recorded = trainer_test::losses(o);
  REQUIRE(plain.size() == 30);
  CHECK(recorded == plain);
}

TEST_CASE("recorded training: the GPT example's losses equal train_step's, bit for bit") {
  trainer::run_options<gpt::family> o = gpt_test::training(1, 1, 1);
  o.steps = 10;
  const std::vector<float> plain = gpt_test::losses(o);
  o.cuda_graph = true;
  const std::vector<float> recorded = gpt_test::losses(o);
  REQUIRE(plain.size() == 10);
  CHECK(recorded == plain);
}

TEST_CASE("recorded training: a mesh of more than one rank is refused with the reason") {
  trainer::options o = trainer_test::small(2, 1);
  o.steps = 3;
  o.cuda_graph = true;
  try {
    trainer_test::losses(o);
    FAIL("a 2x1 mesh was not refused");
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("--cuda-graph records the step of a mesh of one rank") != std::string::npos);
    CHECK(message.find("(2x1) has 2") != std::string::npos);
  }
}

// The training step in the form a CUDA graph records (examples/trainer/recorded_training.hpp,
// run_options::cuda_graph: the batch copied into the same tensors, AdamW's step number read from
// a scalar the step advances, the gradients made inside the step, the loss and gradient norm
// assigned into fixed scalars) trains exactly as train_step does. The host records nothing and
// runs that form of the step as written, so on the host the two runs' losses are equal bit for
// bit: the MLP trainer over 30 steps and the GPT example over 10, on a mesh of one rank. A mesh of
// more ranks is refused with the reason.
//
// The step is also recorded and replayed as a CUDA graph would do it, on the host stand-in for a
// graph (tests/support/replay_tape.hpp): recorded once at the second step, with every operation's
// arguments frozen, its buffers the recording's, and the rules of spmd/recorded_work.hpp checked;
// then replayed at every later step. Its losses equal train_step's bit for bit too (MLP fp32 and
// bf16, 30 steps; GPT with fused attention and overlap, and with the reference attention, 10
// steps), so nothing the step needs changes between steps outside the memory it reads: not the
// batch, the step number, nor a buffer a replay would find stale. On a GPU,
// tests/cuda/trainer_test.cu replays the graph itself.
#include <doctest/doctest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/recording_space.hpp"
#include "gpt_test_support.hpp"
#include "trainer_test_support.hpp"

namespace {

struct replayed_run {
  std::vector<float> losses;
  std::string failure;       // the recording's, if it could not be made
  int recordings = 0;        // by the stand-in backend
  int replays = 0;
  std::size_t operations = 0;  // on the tape
};

// o's run, recorded_training's step on recording_space: a rank alone in its world (o's mesh must
// be 1x1) whose backend records on tapes.
template <class Tc, class Family>
replayed_run replayed(const trainer::run_options<Family>& o) {
  using Space = tpx::testing::recording_space;
  replayed_run out;
  const trainer::text_data data(o.text, Family::context(o.model));
  tpx::spmd(tpx::host, trainer::mesh_of(o), [&](auto& host_rank) {
    tpx::testing::recording_rank r(host_rank.axes());
    typename Family::template tensors<Space> params(r.rank, o.model), m(r.rank, o.model),
        v(r.rank, o.model);
    Family::initialize(params, o.model);
    typename Family::template network<Tc, Space> net(r.rank, o.model);
    trainer::recorded_training<Family, Space> training(r.rank, o, data, 0);
    for (int step = 0; step < o.steps; ++step)
      out.losses.push_back(tpx::scalar_on_host(training.run(net, step, params, m, v).loss));
    out.failure = training.recording().failure();
    out.recordings = r.backend.recordings();
    out.replays = r.backend.replays();
    out.operations = r.backend.operations();
  });
  return out;
}

// Whether the run was recorded once, at its second step, and replayed from there on.
void check_replayed(const replayed_run& run, int steps) {
  CHECK(run.failure.empty());
  CHECK(run.recordings == 1);
  CHECK(run.replays == steps - 1);
  CHECK(run.operations > 50);
}

}  // namespace

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

TEST_CASE("replayed as a graph is: the MLP trainer's losses equal train_step's, bit for bit") {
  for (const bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16" : "fp32"));
    trainer::options o = trainer_test::small(1, 1, /*checkpoint_every*/ 2);
    o.steps = 30;
    o.bf16 = bf16;
    const std::vector<float> plain = trainer_test::losses(o);
    const replayed_run run = bf16 ? replayed<tpx::bf16>(o) : replayed<float>(o);
    check_replayed(run, o.steps);
    REQUIRE(plain.size() == 30);
    CHECK(run.losses == plain);
  }
}

TEST_CASE("replayed as a graph is: the GPT example's losses equal train_step's, bit for bit") {
  // The fused attention with overlap, and the reference attention (its softmax the device's grid
  // passes, their row statistics in buffers made while recording).
  for (const bool fused : {true, false}) {
    INFO((fused ? "fused attention, overlap" : "reference attention"));
    trainer::run_options<gpt::family> o = gpt_test::training(1, 1, 1);
    o.steps = 10;
    o.model.fused_attention = fused;
    o.model.overlap = fused;
    const std::vector<float> plain = gpt_test::losses(o);
    const replayed_run run = replayed<float>(o);
    check_replayed(run, o.steps);
    REQUIRE(plain.size() == 10);
    CHECK(run.losses == plain);
  }
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

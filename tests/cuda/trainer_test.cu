// The example trainers on the CUDA backend follow the host run. The MLP trainer: the losses of
// the first 20 steps of tpx-train-cuda's program (spmd(tpx::cuda_simulated, ...): a 2x2 mesh of
// streams on one GPU, device tensors), with and without FSDP's collectives on each rank's second
// stream (--overlap on), equal those of the host backend on the same 2x2 mesh within 1e-4
// relative. Not bit for bit: cuBLASLt and the host BLAS sum the products in another order,
// the gradient norm is summed in fp32 on the GPU (double on the host), and AdamW carries the
// differences forward; fp32 GEMMs do not use TF32 (rank_options::tf32 is off by default). The
// host side of this comparison is tests/trainer/mesh_equivalence_test.cpp's 1e-5 agreement
// across meshes. The same holds through NCCL with one rank on one GPU (spmd(tpx::cuda_devices,
// 1x1 mesh), so every NCCL call of the step runs on any single-GPU machine), with more ranks
// when the machine has a GPU for each, and as the one process of a torchrun launch
// (spmd(tpx::cuda_launched, ...)); so does the MLP cut into pipeline stages (tpx-train-cuda
// --pipeline), against the host's run on one rank. The GPT example's model: one step's loss and
// gradients on the simulated meshes 2x2 and 2x1x2 (two replicas, HSDP), and on 2x2 without sequence
// parallelism, with SwiGLU's MLP, with rotary positions and with context parallelism (with the
// reference attention and the fused one, and in the load-balanced order), equal the host's
// (tests/trainer/gpt_test.cpp and gpt_hsdp_test.cpp check the host's). With communication
// overlapped (gpt::config::overlap: block gathers and gradient reduce-scatters on each rank's
// background lane, a second stream) one step's loss and gradients equal those without on the
// simulated 2x2 mesh within 1e-5, and 30 training losses within 1e-4 (AdamW carries differences
// forward). No kernel of a step sums by atomics (the embeddings' gradients sort their rows,
// cuda/kernels/scatter_rows.hpp), so a run repeats to the bit: both trainers' losses, twice on
// the simulated 2x2 mesh, the GPT's with overlap. The reported communication, timed on the device,
// is positive, and all of it exposed without overlap. With --cuda-graph on mesh 1x1 the step is
// recorded once as a CUDA graph and replayed, with the unrecorded run's losses. With
// --profile-phases the GPT step's phases, timed by events on the rank's stream, are the host's
// by name and count, and add up to no more than the timed steps' wall time (last case).
#include <doctest/doctest.h>

#include <cstdlib>
#include <tpx/cuda/cuda.hpp>
#include <utility>
#include <vector>

#include "../../examples/gpt/device_ranks.hpp"  // both families' loops of a CUDA rank, compiled once
#include "../trainer/gpt_test_support.hpp"
#include "../trainer/trainer_test_support.hpp"

namespace {
// The first 20 losses of the launcher's run (with FSDP's collectives on each rank's second
// stream: overlap) and the host's, on the same mesh, within 1e-4.
template <class Launcher>
void check_follows_host(int mesh_x, int mesh_y, Launcher launcher, bool overlap = false) {
  trainer::options o = trainer_test::small(mesh_x, mesh_y);
  o.steps = 20;
  const std::vector<float> host = trainer_test::losses(o);
  o.model.overlap = overlap;
  std::vector<float> device;
  trainer::run(o, [&](const trainer::step_report& r) { device.push_back(r.loss); }, launcher);
  REQUIRE(device.size() == host.size());
  const float worst = trainer_test::worst_relative_difference(device, host);
  INFO("mesh " << mesh_x << "x" << mesh_y << (overlap ? ", overlap" : "")
               << ": worst relative loss difference " << worst);
  CHECK(worst <= 1e-4f);
}
}  // namespace

TEST_CASE("trainer: the simulated CUDA mesh follows the host run") {
  check_follows_host(2, 2, tpx::cuda_simulated);
  check_follows_host(2, 2, tpx::cuda_simulated, true);
}

TEST_CASE("trainer: NCCL follows the host run, one rank per GPU") {
  check_follows_host(1, 1, tpx::cuda_devices);
  if (tpx::cuda::device_count() >= 2) check_follows_host(2, 1, tpx::cuda_devices);
  if (tpx::cuda::device_count() >= 4) check_follows_host(2, 2, tpx::cuda_devices);
}

// tpx-train-cuda --pipeline (examples/trainer/pipelined_family.hpp on CUDA ranks): the 20 losses
// of 2 stages of 2x1 in 1F1B and of 1x2 in the zero-bubble V (its passes on each rank's second
// stream: --overlap on) on the simulated mesh, and over NCCL of one stage of 1x1 on one GPU (2
// stages of 1x1 where the machine has 2 GPUs), within 1e-4 relative of the host's run of the
// model on one rank (pipelined_training_test checks the host's pipelines against it within
// 1e-5).
TEST_CASE("trainer: the pipelined MLP on CUDA ranks follows the host run on one rank") {
  trainer::options whole = trainer_test::small(1, 1);
  whole.steps = 20;
  const std::vector<float> host = trainer_test::losses(whole);
  const auto follows = [&](auto launcher, int stages, int x, int y, const char* schedule,
                           bool overlap = false) {
    auto o = trainer_test::pipelined(stages, x, y, schedule);
    o.model.overlap = overlap;
    std::vector<float> device;
    trainer::run(
        o, [&](const trainer::step_report& r) { device.push_back(r.loss); }, launcher);
    const float worst = trainer_test::worst_relative_difference(device, host);
    INFO(stages << " stages of " << x << "x" << y << ", " << schedule
                << ": worst relative loss difference " << worst);
    CHECK(worst <= 1e-4f);
  };
  follows(tpx::cuda_simulated, 2, 2, 1, "1f1b");
  follows(tpx::cuda_simulated, 2, 1, 2, "zero-bubble-v", true);
  follows(tpx::cuda_devices, 1, 1, 1, "1f1b");
  if (tpx::cuda::device_count() >= 2) follows(tpx::cuda_devices, 2, 1, 1, "1f1b");
}

TEST_CASE("trainer: a process of a torchrun launch follows the host run") {
  // spmd(tpx::cuda_launched, ...), as tpx-train-cuda runs under torchrun: this process is the one
  // rank of a launch of world size 1, NCCL's id through the TCP rendezvous.
  const std::vector<std::pair<const char*, const char*>> torchrun{
      {"RANK", "0"},
      {"WORLD_SIZE", "1"},
      {"LOCAL_RANK", "0"},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", "29533"}};  // cuda_nccl_launch_test, which may run beside it, has 29531
  for (const auto& [name, value] : torchrun) ::setenv(name, value, 1);
  check_follows_host(1, 1, tpx::cuda_launched);
  for (const auto& [name, value] : torchrun) ::unsetenv(name);
}

TEST_CASE("gpt: the simulated CUDA mesh gives the host's loss and gradients") {
  // One forward and backward pass of the GPT example's model (cuBLASLt batched GEMMs, the
  // attention and row functors on the device) against the host's on the same mesh, 2x2 and,
  // with two replicas (HSDP), 2x1x2: 1e-5 relative on the loss, 1e-4 of each gradient's largest
  // element (other summation orders).
  for (const gpt::mesh& mesh : {gpt::mesh{1, 2, 2}, gpt::mesh{2, 1, 2}}) {
    CAPTURE(mesh.to_string());
    const auto host = gpt_test::gradients(mesh);
    const auto device = gpt_test::gradients(mesh, tpx::cuda_simulated);
    const auto d = gpt_test::differences(device, host, 1e-5, 1e-4);
    CHECK_MESSAGE(d.empty(), gpt_test::joined(d));
  }
  // Without sequence parallelism (the norms' whole-row kernels on a gradient partial over Y),
  // with SwiGLU's MLP (its gate functors as device kernels), with rotary embedding (its
  // rotation as a device kernel) and with context parallelism (the causal softmax of a block of
  // queries in the device's grid passes; with fused attention, the CUDA-core kernels over it;
  // and in the load-balanced order).
  gpt::config plain = gpt_test::tiny();
  plain.plain_tensor_parallel = true;
  gpt::config swiglu = gpt_test::tiny();
  swiglu.swiglu = true;
  gpt::config rope = gpt_test::tiny();
  rope.rope = true;
  gpt::config context = gpt_test::tiny();
  context.context_parallel = true;
  gpt::config fused_context = context;
  fused_context.fused_attention = true;
  // The load-balanced order (T = 8: chunks of 2 over X = 2), with rotary positions: the chunks'
  // kernel calls, the keys' reordering copies (copy_box) and the rotation of two runs on the GPU.
  gpt::config balanced = fused_context;
  balanced.seq = 8;
  balanced.load_balance = true;
  balanced.rope = true;
  for (const gpt::config& c : {plain, swiglu, rope, context, fused_context, balanced}) {
    CAPTURE(c.swiglu);
    CAPTURE(c.rope);
    CAPTURE(c.context_parallel);
    CAPTURE(c.fused_attention);
    CAPTURE(c.load_balance);
    const auto host = gpt_test::gradients(gpt::mesh{1, 2, 2}, tpx::host, c);
    const auto device = gpt_test::gradients(gpt::mesh{1, 2, 2}, tpx::cuda_simulated, c);
    const auto d = gpt_test::differences(device, host, 1e-5, 1e-4);
    CHECK_MESSAGE(d.empty(), gpt_test::joined(d));
  }
}

TEST_CASE("gpt: overlapped communication on the simulated CUDA mesh gives the same results as without") {
  gpt::config c = gpt_test::tiny();
  c.layers = 3;
  for (int every : {0, 2}) {
    CAPTURE(every);
    c.checkpoint_every = every;
    c.overlap = false;
    const auto plain = gpt_test::gradients(gpt::mesh{1, 2, 2}, tpx::cuda_simulated, c);
    c.overlap = true;
    const auto overlapped = gpt_test::gradients(gpt::mesh{1, 2, 2}, tpx::cuda_simulated, c);
    const auto d = gpt_test::differences(overlapped, plain, 1e-5, 1e-5);
    CHECK_MESSAGE(d.empty(), gpt_test::joined(d));
  }
  std::vector<float> losses[2];
  for (const bool overlap : {false, true}) {
    trainer::run_options<gpt::family> o = gpt_test::training(1, 2, 2);
    o.model.overlap = overlap;
    trainer::run(
        o,
        [&](const trainer::step_report& r) {
          losses[overlap ? 1 : 0].push_back(r.loss);
          // Timed on the device (cuda/communication_clock.hpp); without overlap every collective
          // runs on the rank's own stream, all of it exposed.
          CHECK(r.collective_seconds > 0);
          CHECK(r.exposed_collective_seconds > 0);
          if (!overlap) CHECK(r.exposed_collective_seconds == r.collective_seconds);
        },
        tpx::cuda_simulated);
  }
  REQUIRE(losses[0].size() == 30);
  const float worst = gpt_test::worst_relative_difference(losses[1], losses[0]);
  INFO("worst relative loss difference " << worst);
  CHECK(worst <= 1e-4f);
}

// --cuda-graph (examples/trainer/recorded_training.hpp): on mesh 1x1, of the simulated launcher
// and over NCCL, the MLP trainer's step is recorded as a CUDA graph at its second step and every
// later step replays it; its 20 losses equal the unrecorded run's within 1e-5 relative (the same
// kernels on the same data, launched as a graph). So does the pipelined MLP's on one stage of 1x1
// (only a rank alone in its world records: its schedule of 4 microbatches inside the recording),
// on the simulated mesh. The GPT
// example's, with overlap on (a background lane inside the recording), the same over 10 steps.
namespace {
template <class Options, class Launcher>
void check_graph_replays(Options o, Launcher launcher) {
  o.steps = 20;
  std::vector<float> losses[2];
  std::vector<bool> replayed;
  for (const bool graph : {false, true}) {
    o.cuda_graph = graph;
    trainer::run(
        o,
        [&](const trainer::step_report& r) {
          losses[graph ? 1 : 0].push_back(r.loss);
          if (graph) replayed.push_back(r.replayed);
        },
        launcher);
  }
  REQUIRE(losses[1].size() == 20);
  CHECK_FALSE(replayed[0]);  // the first step runs unrecorded
  for (std::size_t s = 1; s < replayed.size(); ++s) CHECK(replayed[s]);
  const float worst = gpt_test::worst_relative_difference(losses[1], losses[0]);
  INFO("worst relative loss difference " << worst);
  CHECK(worst <= 1e-5f);
}
}  // namespace

TEST_CASE("trainer: a run on the GPU repeats every loss to the bit") {
  // Two runs of 10 steps on the simulated 2x2 mesh; every loss compared as a float, ==.
  const auto repeats = [](auto options) {
    options.steps = 10;
    std::vector<float> losses[2];
    for (auto& run_losses : losses)
      trainer::run(
          options, [&](const trainer::step_report& r) { run_losses.push_back(r.loss); },
          tpx::cuda_simulated);
    REQUIRE(losses[0].size() == 10);
    CHECK(losses[1] == losses[0]);
  };
  repeats(trainer_test::small(2, 2));
  trainer::run_options<gpt::family> g = gpt_test::training(1, 2, 2);
  g.model.overlap = true;
  repeats(g);
}

TEST_CASE("trainer: --cuda-graph replays the recorded step with the unrecorded run's losses") {
  check_graph_replays(trainer_test::small(1, 1), tpx::cuda_simulated);
  check_graph_replays(trainer_test::small(1, 1), tpx::cuda_devices);
  check_graph_replays(trainer_test::pipelined(1, 1, 1, "1f1b"), tpx::cuda_simulated);

  trainer::run_options<gpt::family> g = gpt_test::training(1, 1, 1);
  g.steps = 10;
  g.model.overlap = true;
  std::vector<float> gpt_losses[2];
  bool gpt_replayed = true;
  for (const bool graph : {false, true}) {
    g.cuda_graph = graph;
    trainer::run(
        g,
        [&](const trainer::step_report& r) {
          gpt_losses[graph ? 1 : 0].push_back(r.loss);
          if (graph && r.step > 0) gpt_replayed = gpt_replayed && r.replayed;
        },
        tpx::cuda_simulated);
  }
  CHECK(gpt_replayed);
  const float gpt_worst = gpt_test::worst_relative_difference(gpt_losses[1], gpt_losses[0]);
  INFO("GPT: worst relative loss difference " << gpt_worst);
  CHECK(gpt_worst <= 1e-5f);
}

TEST_CASE("trainer: --profile-phases times the GPT step's phases on the GPU as on the host") {
  trainer::run_options<gpt::family> o = gpt_test::training(1, 1, 1);
  o.steps = 4;
  o.profile_phases = true;
  const auto last_report = [&](auto launcher) {
    trainer::step_report last{};
    trainer::run(o, [&](const trainer::step_report& r) { last = r; }, launcher);
    return last;
  };
  const trainer::step_report host = last_report(tpx::host);
  const trainer::step_report device = last_report(tpx::cuda_simulated);
  REQUIRE(device.phase_steps == host.phase_steps);
  REQUIRE(device.phases.size() == host.phases.size());
  double in_phases = 0;
  for (std::size_t i = 0; i < host.phases.size(); ++i) {
    CAPTURE(host.phases[i].name);
    CHECK(device.phases[i].name == host.phases[i].name);
    CHECK(device.phases[i].count == host.phases[i].count);
    CHECK(device.phases[i].seconds >= 0);
    in_phases += device.phases[i].seconds;
  }
  CHECK(in_phases > 0);
  CHECK(in_phases <= device.phase_wall_seconds);
}


// The GPT example's model (examples/gpt/model.hpp) computes the same thing on every mesh, and its
// backward pass is the gradient of its loss:
//  - on meshes 2x1, 1x2, 2x2, 4x1, 1x4 and 3x2 the loss and every parameter's gradient equal the
//    unsharded 1x1 run's (relative 1e-5 for the loss, 1e-4 of the largest element for each
//    gradient: sharded runs sum partial products in other orders); extents chosen so that heads,
//    positions and widths split unevenly; with fused attention (nn/fused_attention.hpp) on 1x1,
//    2x2 and 2x1x3 the same against the reference attention's 1x1 run;
//  - activation checkpointing every 1, 2 or 3 blocks gives the same loss and gradients to the bit
//    (on 1x1, 2x2 and, with two replicas, 2x1x2);
//  - for every parameter tensor, <grad, v> along a random direction v matches the central
//    difference of the loss, on 1x1 and 2x2 (directional_check.hpp: tolerances there);
//  - 30 steps of the shared trainer (examples/trainer/training.hpp) on 2x2, 4x1 and 1x4, with
//    and without activation checkpointing, follow the 1x1 run's losses (relative 1e-4), which
//    fall; in bf16 they stay within 2% of fp32's;
//  - without sequence parallelism (config::plain_tensor_parallel: the stream whole on every Y
//    rank, an AllReduce over Y after each sublayer) the loss and gradients equal the 1x1 run's
//    on 1x1, 2x1, 1x2, 2x2, 1x4, 3x2, 2x1x2 and 2x2x2, and with fused attention on 2x2, as above;
//    30 training steps on 2x2, 1x4 and 2x2x2, with and without checkpointing (with overlap
//    when checkpointing), follow the 1x1 losses (relative 1e-4); rank 0's peak memory on 1x2 is
//    above the sequence-parallel run's (it holds the whole stream), bf16 stays within 2% of fp32,
//    checkpointing (on 1x3) and overlap (on 2x2 and 4x1) change no bit, and a checkpoint saved
//    with sequence parallelism resumes without it and back, and then with context parallelism on
//    4x1, following the 1x1 losses;
//  - overlapping communication (config::overlap: gathers one block ahead and gradient
//    reduce-scatters on each rank's communication thread) changes no bit of the loss and
//    gradients (2x2, 4x1, with and without checkpointing) nor of 30 training losses (2x2, 4x1),
//    and the reported exposed communication is at most the total (equal to it without overlap);
//  - trainer::block_visits lists the blocks in the order stack_forward_backward visits them,
//    the order in which the model gathers their weights ahead;
//  - the trainer's peak memory of rank 0 (its memory meter) holds at least the model state on
//    1x1, counted from the config, and less on 2x2;
//  - with SwiGLU's MLP (config::swiglu: a third matrix Wgate, silu(h Wgate) * (h Win)) the loss
//    and gradients equal the 1x1 SwiGLU run's on 2x2, 4x1, 1x4, 2x1x2, and without sequence
//    parallelism and with fused attention on 2x2 (tolerances as above), the backward pass is the
//    gradient of the loss by central differences on 1x1 and 2x2, 30 training steps on 2x2 with
//    checkpointing and overlap follow the 1x1 losses, which fall, and a GELU checkpoint does not
//    resume as a SwiGLU model, nor one saved before checkpoints recorded the MLP, which resumes
//    as the GELU model it is;
//  - with rotary position embedding (config::rope: q and k turned by their positions' angles, no
//    position table) the loss and gradients equal the 1x1 rotary run's on 2x2, 4x1, 1x4, 2x1x2
//    and 3x2, and without sequence parallelism and with fused attention (with SwiGLU: Llama's
//    block) on 2x2, the backward pass is the gradient of the loss by central differences on 1x1
//    and 2x2, 30 training steps on 2x2 with checkpointing and overlap follow the 1x1 losses, which
//    fall, and a checkpoint of the learned-position model does not resume with rotary positions;
//  - with context parallelism (config::context_parallel: X splits each sequence instead of the
//    batch, keys and values all-gathered over X) the loss and gradients equal the 1x1 run's on
//    1x1, 2x1, 2x2, 4x1, 3x2, 2x2x1 and 2x2x2, and with Llama's block, checkpointing and overlap
//    on 2x2 and 3x1, and with the fused kernels over each rank's block of queries on 2x1, 2x2,
//    4x1, 2x2x2 (and Llama's block on 2x2, 3x1); 30 training steps on 2x2 follow the 1x1 losses;
//    a data-parallel batch and plain tensor parallelism are refused with the reason;
//  - in the load-balanced order (config::load_balance: each sequence in 2X chunks, rank x holding
//    chunks x and 2X-1-x, the fused attention and rotary embedding told so by type) the loss and
//    gradients equal the plain 1x1 run's on 1x1, 2x1, 2x2, 3x1, 3x2 and 2x2x2, and with Llama's
//    block, checkpointing and overlap on 2x2 and 3x1; 30 training steps on 2x2 follow 1x1's; a
//    config without context parallelism or fused attention, or a --seq the mesh cannot cut, is
//    refused with the reason;
//  - --profile-phases (run_options::profile_phases) reports, with the last step, every phase the
//    step marks, each as often per step as the model runs it, together within the timed steps'
//    wall time, and leaves every loss as it was, on 1x1 and 2x2; with --cuda-graph it is refused.
// gpt_hsdp_test.cpp checks the same against 1x1 on meshes with replicas (R > 1), and checkpoints
// across R.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../../examples/trainer/block_stack.hpp"
#include "../support/run_command.hpp"
#include "gpt_checks.hpp"

using gpt_test::check_backward_is_the_loss_gradient;
using gpt_test::check_meshes_follow;
using gpt_test::check_training_follows_one_rank;
using gpt_test::default_checkpoint_resumed_as;
using gpt_test::gradients;
using gpt_test::losses;
using gpt_test::text;
using gpt_test::tiny;
using gpt_test::training;
using gpt_test::worst_relative_difference;

TEST_CASE("GPT with FSDP over X and tensor + sequence parallelism over Y follows the 1x1 run") {
  const gpt_test::run_result want = gradients({1, 1, 1});
  REQUIRE(want.grads.size() == 2 + 8 * 2 + 2);
  check_meshes_follow(want, tiny(),
                      {gpt::mesh{1, 2, 1}, gpt::mesh{1, 1, 2}, gpt::mesh{1, 2, 2},
                       gpt::mesh{1, 4, 1}, gpt::mesh{1, 1, 4}, gpt::mesh{1, 3, 2}});
}

// Without sequence parallelism the residual stream is whole on every rank of Y and its gradient
// a partial sum over Y: the same model, with an AllReduce over Y after each sublayer instead of
// an AllGather of T before it and a ReduceScatter after it.
TEST_CASE("GPT with plain tensor parallelism (no sequence parallelism) follows the 1x1 run") {
  const gpt_test::run_result want = gradients({1, 1, 1});
  gpt::config plain = tiny();
  plain.plain_tensor_parallel = true;
  check_meshes_follow(want, plain,
                      {gpt::mesh{1, 1, 1}, gpt::mesh{1, 2, 1}, gpt::mesh{1, 1, 2},
                       gpt::mesh{1, 2, 2}, gpt::mesh{1, 1, 4}, gpt::mesh{1, 3, 2},
                       gpt::mesh{2, 1, 2}, gpt::mesh{2, 2, 2}});
  plain.fused_attention = true;
  check_meshes_follow(want, plain, {gpt::mesh{1, 2, 2}});
}

TEST_CASE("GPT with fused attention computes the reference attention's loss and gradients") {
  const gpt_test::run_result want = gradients({1, 1, 1});
  gpt::config fused = tiny();
  fused.fused_attention = true;
  check_meshes_follow(want, fused, {gpt::mesh{1, 1, 1}, gpt::mesh{1, 2, 2}, gpt::mesh{2, 1, 3}});
}

TEST_CASE("GPT's sharded backward pass is the gradient of its loss") {
  check_backward_is_the_loss_gradient(tiny(), 2 + 8 * 2 + 2);
}

TEST_CASE("GPT activation checkpointing does not change a single bit") {
  gpt::config c = tiny();
  c.layers = 3;  // segments of 1, 2 and 3 blocks, one of them short
  for (const gpt::mesh& mesh :
       {gpt::mesh{1, 1, 1}, gpt::mesh{1, 2, 2}, gpt::mesh{2, 1, 2}, gpt::mesh{1, 1, 3}}) {
    CAPTURE(mesh.to_string());
    c.plain_tensor_parallel = mesh.size<gpt::Y>() == 3;  // the last without sequence parallelism
    c.checkpoint_every = 0;
    const gpt_test::run_result plain = gradients(mesh, tpx::host, c);
    for (int every : {1, 2, 3}) {
      CAPTURE(every);
      c.checkpoint_every = every;
      const auto d = gpt_test::differences(gradients(mesh, tpx::host, c), plain, 0.0, 0.0);
      CHECK_MESSAGE(d.empty(), gpt_test::joined(d));
    }
  }
}

namespace {

// The reports of 30 steps of the shared trainer on the tiny model on mesh mx x my, its
// communication overlapped or not.
std::vector<trainer::step_report> trained(int mx, int my, bool overlap) {
  trainer::run_options<gpt::family> o = training(1, mx, my);
  o.model.overlap = overlap;
  std::vector<trainer::step_report> out;
  trainer::run(o, [&](const trainer::step_report& r) { out.push_back(r); });
  return out;
}

std::vector<float> losses_of(const std::vector<trainer::step_report>& reports) {
  std::vector<float> out;
  for (const trainer::step_report& r : reports) out.push_back(r.loss);
  return out;
}

}  // namespace

TEST_CASE("GPT training on 2x2, 4x1 and 1x4 follows the 1x1 losses, which fall") {
  const std::vector<float> want = losses(training(1, 1, 1));
  REQUIRE(want.size() == 30);
  CHECK(want.back() < want.front() - 0.5f);
  for (int every : {0, 1}) {
    for (const auto& [mx_, my_] : std::vector<std::pair<int, int>>{{2, 2}, {4, 1}, {1, 4}}) {
      const int mx = mx_, my = my_;
      CAPTURE(mx);
      CAPTURE(my);
      CAPTURE(every);
      const float worst = worst_relative_difference(losses(training(1, mx, my, every)), want);
      INFO("worst relative loss difference " << worst);
      CHECK(worst <= 1e-4f);
    }
  }
}

TEST_CASE(
    "GPT training without sequence parallelism on 2x2, 1x4 and 2x2x2 follows the 1x1 losses") {
  const std::vector<float> want = losses(training(1, 1, 1));
  REQUIRE(want.size() == 30);
  for (int every : {0, 1}) {
    for (const gpt::mesh& mesh : {gpt::mesh{1, 2, 2}, gpt::mesh{1, 1, 4}, gpt::mesh{2, 2, 2}}) {
      CAPTURE(mesh.to_string());
      CAPTURE(every);
      trainer::run_options<gpt::family> o =
          training(mesh.size<gpt::R>(), mesh.size<gpt::X>(), mesh.size<gpt::Y>(), every);
      o.model.plain_tensor_parallel = true;
      o.model.overlap = every == 1;  // with checkpointing, the gathers ahead on the side too
      const float worst = worst_relative_difference(losses(o), want);
      INFO("worst relative loss difference " << worst);
      CHECK(worst <= 1e-4f);
    }
  }
}

TEST_CASE(
    "without sequence parallelism the stream is whole on each Y rank, and bf16 follows fp32") {
  // What only the plain layout does: rank 0 holds the whole stream, so its peak memory on 1x2 is
  // above the sequence-parallel run's, which holds half of it.
  std::int64_t peak[2] = {};
  std::vector<float> fp32;
  for (const bool plain : {false, true}) {
    trainer::run_options<gpt::family> o = training(1, 1, 2);
    o.steps = 3;
    o.model.plain_tensor_parallel = plain;
    trainer::run(o, [&](const trainer::step_report& r) {
      peak[plain] = r.peak_bytes;
      if (!plain) fp32.push_back(r.loss);
    });
  }
  INFO("peak bytes of rank 0, SP " << peak[0] << ", plain TP " << peak[1]);
  CHECK(peak[0] > 0);
  CHECK(peak[1] > peak[0]);
  // bf16 keeps the stream's gradient, a partial sum over Y, in bf16: its losses stay within 2% of
  // the sequence-parallel fp32 run's (as bf16 with SP does, "GPT training in bf16" below).
  trainer::run_options<gpt::family> o = training(1, 1, 2);
  o.steps = 3;
  o.model.plain_tensor_parallel = true;
  o.bf16 = true;
  const float worst = worst_relative_difference(losses(o), fp32);
  INFO("worst relative difference " << worst);
  CHECK(worst <= 0.02f);
}

TEST_CASE("a GPT checkpoint resumes in every layout: with and without SP, context parallel") {
  // The same parameters in every layout: 10 steps on 2x2 with SP, 10 resumed on 1x2 without,
  // 10 resumed on 2x2 with, 10 resumed on 4x1 with context parallelism, follow the
  // uninterrupted 1x1 run.
  trainer::run_options<gpt::family> one = training(1, 1, 1);
  one.steps = 40;
  const std::vector<float> want = losses(one);
  const std::filesystem::path dir = scratch_folder("tpx-gpt-test", "layouts");
  std::vector<float> got;
  enum layout { sequence_parallel, plain_tensor_parallel, context_parallel };
  for (const auto& [x_, y_, steps_, layout_] : {std::array{2, 2, 10, int(sequence_parallel)},
                                               std::array{1, 2, 20, int(plain_tensor_parallel)},
                                               std::array{2, 2, 30, int(sequence_parallel)},
                                               std::array{4, 1, 40, int(context_parallel)}}) {
    const int x = x_, y = y_, steps = steps_;  // clang before 16: no bindings in lambdas
    trainer::run_options<gpt::family> o = training(1, x, y);
    o.steps = steps;
    o.ckpt_dir = dir.string();
    o.resume = steps > 10;
    o.model.plain_tensor_parallel = layout_ == plain_tensor_parallel;
    o.model.context_parallel = layout_ == context_parallel;
    const std::vector<float> part = losses(o);
    CHECK(part.size() == 10);
    got.insert(got.end(), part.begin(), part.end());
  }
  const float worst = worst_relative_difference(got, want);
  INFO("worst relative loss difference " << worst);
  CHECK(worst <= 1e-4f);
}

TEST_CASE("GPT training in bf16 follows the fp32 losses") {
  // bf16 keeps 8 bits of mantissa: the losses drift from fp32's by rounding, not by a different
  // computation, so they stay within 2% over 30 steps.
  trainer::run_options<gpt::family> o = training(1, 2, 2);
  const std::vector<float> fp32 = losses(o);
  o.bf16 = true;
  const std::vector<float> bf16 = losses(o);
  const float worst = worst_relative_difference(bf16, fp32);
  INFO("worst relative difference " << worst);
  CHECK(worst <= 0.02f);
  CHECK(bf16 != fp32);  // it did compute in bf16
}

TEST_CASE("the trainer reports rank 0's peak memory: at least its share of the model state") {
  // Parameters, counted from the config (not from the model's tensors): the two tables, per
  // block two norms, Q, K, V, O and the MLP's two matrices, the final norm and the head.
  const gpt::config c = tiny();
  const std::int64_t d = c.d_model();
  const std::int64_t n = c.vocab * d + c.seq * d + c.layers * (2 * d + 4 * d * d + 2 * d * c.ffn) +
                         d + d * c.vocab;
  const std::int64_t state = 4 * n * static_cast<std::int64_t>(sizeof(float));  // w, g, m, v
  const auto peak = [](trainer::run_options<gpt::family> o) {
    o.steps = 2;
    std::int64_t bytes = 0;
    trainer::run(o, [&](const trainer::step_report& r) { bytes = r.peak_bytes; });
    return bytes;
  };
  const std::int64_t whole = peak(training(1, 1, 1)), sharded = peak(training(1, 2, 2));
  CAPTURE(state);
  CAPTURE(whole);
  CAPTURE(sharded);
  CHECK(whole >= state);      // one rank holds the whole model state, and activations beside it
  CHECK(whole < 4 * state);   // the tiny model's activations are smaller than its state
  CHECK(sharded >= state / 8);  // FSDP over X and TP over Y: about a quarter of it, unevenly
  CHECK(sharded < whole);
}

TEST_CASE("GPT with communication overlapped computes the same bits as without") {
  gpt::config c = tiny();
  c.layers = 3;
  for (const auto& [mx_, my_] : std::vector<std::pair<int, int>>{{2, 2}, {4, 1}}) {
    const int mx = mx_, my = my_;
    CAPTURE(mx);
    CAPTURE(my);
    for (int every : {0, 2}) {
      for (const bool plain : {false, true}) {
        CAPTURE(every);
        CAPTURE(plain);
        c.checkpoint_every = every;
        c.plain_tensor_parallel = plain;
        c.overlap = false;
        const gpt_test::run_result off = gradients(gpt::mesh{1, mx, my}, tpx::host, c);
        c.overlap = true;
        const auto d =
            gpt_test::differences(gradients(gpt::mesh{1, mx, my}, tpx::host, c), off, 0.0, 0.0);
        CHECK_MESSAGE(d.empty(), gpt_test::joined(d));
      }
    }
    const auto on = trained(mx, my, true);
    const auto off = trained(mx, my, false);
    CHECK(losses_of(on) == losses_of(off));
    REQUIRE(on.size() == 30);
    for (const trainer::step_report& r : on) {
      CAPTURE(r.step);
      CHECK(r.exposed_collective_seconds <= r.collective_seconds);
      CHECK(r.collective_seconds > 0);
    }
    for (const trainer::step_report& r : off) {
      CAPTURE(r.step);
      CHECK(r.exposed_collective_seconds == r.collective_seconds);
    }
  }
}

TEST_CASE("--profile-phases times every phase the GPT step marks, and changes no loss") {
  for (const auto& [mx_, my_] : std::vector<std::pair<int, int>>{{1, 1}, {2, 2}}) {
    const int mx = mx_, my = my_;
    CAPTURE(mx);
    CAPTURE(my);
    trainer::run_options<gpt::family> o = training(1, mx, my);
    o.steps = 4;
    const std::vector<float> unprofiled = losses(o);
    o.profile_phases = true;
    std::vector<trainer::step_report> reports;
    trainer::run(o, [&](const trainer::step_report& r) { reports.push_back(r); });
    REQUIRE(reports.size() == 4);
    std::vector<float> profiled;
    for (const trainer::step_report& r : reports) profiled.push_back(r.loss);
    CHECK(profiled == unprofiled);  // the same bits
    for (std::size_t i = 0; i + 1 < reports.size(); ++i) CHECK(reports[i].phases.empty());
    const trainer::step_report& last = reports.back();
    CHECK(last.phase_steps == 3);  // the first step warms up, untimed
    // Marks per step: once per block forward and backward, the weights before each of both.
    const std::int64_t layers = o.model.layers;
    const std::vector<std::pair<std::string, std::int64_t>> marked = {
        {"batch upload", 1}, {"forward and backward", 1}, {"embedding forward", 1},
        {"block weights", 2 * layers}, {"attention norm", layers}, {"QKV projections", layers},
        {"attention", layers}, {"attention output", layers}, {"MLP norm", layers},
        {"MLP up (GELU)", layers}, {"MLP down", layers}, {"final norm", 1}, {"LM head", 1},
        {"cross-entropy", 1}, {"LM head backward", 1}, {"final norm backward", 1},
        {"MLP down backward", layers}, {"MLP up backward", layers}, {"MLP norm backward", layers},
        {"attention output backward", layers}, {"attention backward", layers},
        {"QKV backward", layers}, {"attention norm backward", layers}, {"embedding backward", 1},
        {"gradient reductions (wait)", 1}, {"gradient norm", 1}, {"AdamW", 1}};
    REQUIRE(last.phases.size() == marked.size());
    double in_phases = 0;
    for (const auto& [name, per_step] : marked) {
      CAPTURE(name);
      const auto found = std::find_if(last.phases.begin(), last.phases.end(),
                                      [&](const tpx::phase_time& p) { return p.name == name; });
      REQUIRE(found != last.phases.end());
      CHECK(found->count == per_step * last.phase_steps);
      CHECK(found->seconds >= 0);
      in_phases += found->seconds;
    }
    CHECK(in_phases > 0);
    CHECK(in_phases <= last.phase_wall_seconds);
  }
  trainer::run_options<gpt::family> graph = training(1, 1, 1);
  graph.cuda_graph = true;
  graph.profile_phases = true;
  CHECK_THROWS_AS(losses(graph), std::invalid_argument);
}

TEST_CASE("block_visits lists the blocks in the order the block loop visits them") {
  for (int layers = 1; layers <= 5; ++layers)
    for (int every = 0; every <= layers + 1; ++every) {
      CAPTURE(layers);
      CAPTURE(every);
      std::vector<int> visited;
      struct state {
        int out;
      };
      trainer::stack_forward_backward(
          layers, every, 0,
          [&](int l, int x) {
            visited.push_back(l);
            return state{x + 1};
          },
          [](int x) { return x; },
          [&](int l, const state&, int dx) {
            visited.push_back(l);
            return dx;
          });
      CHECK(visited == trainer::block_visits(layers, every));
    }
}

TEST_CASE("GPT with SwiGLU's MLP: every mesh has the 1x1 gradients, which are the loss's") {
  gpt::config swiglu = tiny();
  swiglu.swiglu = true;
  const gpt_test::run_result want = gradients({1, 1, 1}, tpx::host, swiglu);
  REQUIRE(want.grads.size() == 2 + 9 * 2 + 2);
  CHECK(want.names[9] == "block.0.w_gate");
  CHECK(want.loss != gradients({1, 1, 1}).loss);  // another model than GELU's
  check_meshes_follow(want, swiglu,
                      {gpt::mesh{1, 2, 2}, gpt::mesh{1, 4, 1}, gpt::mesh{1, 1, 4},
                       gpt::mesh{2, 1, 2}});
  gpt::config variant = swiglu;
  variant.plain_tensor_parallel = true;
  variant.fused_attention = true;
  check_meshes_follow(want, variant, {gpt::mesh{1, 2, 2}});
  check_backward_is_the_loss_gradient(swiglu, 2 + 9 * 2 + 2);
}

TEST_CASE("GPT training with SwiGLU on 2x2 follows the 1x1 losses; a GELU checkpoint is refused") {
  const auto swiglu = [](gpt::config& c) { c.swiglu = true; };
  check_training_follows_one_rank(swiglu);
  trainer::run_options<gpt::family> resumed = default_checkpoint_resumed_as(swiglu, "swiglu");
  const std::filesystem::path dir = resumed.ckpt_dir;
  CHECK_THROWS_WITH(losses(resumed),
                    doctest::Contains("has mlp = \"gelu\", this run \"swiglu\""));

  // A checkpoint saved before the shape recorded mlp (its state without the key, the manifest
  // re-sealed) is the GELU model's: GELU resumes from it as from the one saved above, SwiGLU is
  // refused.
  trainer::run_options<gpt::family> continued = resumed;
  continued.model.swiglu = false;
  const std::filesystem::path saved = scratch_folder("tpx-gpt-test", "swiglu-saved");
  std::filesystem::copy(dir, saved, std::filesystem::copy_options::recursive);
  const std::vector<float> want_continued = losses(continued);
  REQUIRE(want_continued.size() == 2);
  const std::filesystem::path manifest = tpx::io::step_folder(saved, 2) / "manifest.json";
  nlohmann::json old = nlohmann::json::parse(tpx::io::read_text_file(manifest));
  REQUIRE(old["state"].erase("mlp") == 1);
  old[tpx::io::manifest_checksum_key] = tpx::io::to_hex(tpx::io::manifest_checksum(old));
  std::ofstream(manifest) << old.dump(1);
  continued.ckpt_dir = resumed.ckpt_dir = saved.string();
  CHECK_THROWS_WITH(losses(resumed),
                    doctest::Contains("has mlp = \"gelu\", this run \"swiglu\""));
  CHECK(losses(continued) == want_continued);
}

TEST_CASE("GPT with rotary positions: every mesh has the 1x1 gradients, which are the loss's") {
  gpt::config rope = tiny();
  rope.rope = true;
  const gpt_test::run_result want = gradients({1, 1, 1}, tpx::host, rope);
  // No position table: the token table, 8 per block, the final norm and the head.
  REQUIRE(want.grads.size() == 1 + 8 * 2 + 2);
  CHECK(want.names[1] == "block.0.norm1");
  CHECK(want.loss != gradients({1, 1, 1}).loss);  // another model than the learned positions'
  check_meshes_follow(want, rope,
                      {gpt::mesh{1, 2, 2}, gpt::mesh{1, 4, 1}, gpt::mesh{1, 1, 4},
                       gpt::mesh{2, 1, 2}, gpt::mesh{1, 3, 2}});
  gpt::config variant = rope;
  variant.plain_tensor_parallel = true;
  variant.fused_attention = true;
  check_meshes_follow(want, variant, {gpt::mesh{1, 2, 2}});

  // Llama's block: rotary positions, SwiGLU, RMSNorm, fused attention.
  gpt::config llama = rope;
  llama.swiglu = true;
  const gpt_test::run_result llama_want = gradients({1, 1, 1}, tpx::host, llama);
  llama.fused_attention = true;
  check_meshes_follow(llama_want, llama, {gpt::mesh{1, 2, 2}});
  check_backward_is_the_loss_gradient(rope, 1 + 8 * 2 + 2);
}

TEST_CASE("GPT training with rotary positions on 2x2 follows 1x1; a learned checkpoint refused") {
  const auto rope = [](gpt::config& c) { c.rope = true; };
  check_training_follows_one_rank(rope);
  CHECK_THROWS_WITH(losses(default_checkpoint_resumed_as(rope, "rope")),
                    doctest::Contains("has positions = \"learned\", this run \"rotary\""));
}

TEST_CASE("GPT with context parallelism over X: every mesh has the 1x1 gradients, on a CP batch") {
  // X splits each sequence (T = 6: blocks of 3 and 3 over 2 ranks, 2, 2, 2 over 3, 2, 2, 1, 1
  // over 4; Y splits them again in the stream) instead of the batch; the same model.
  const gpt_test::run_result want = gradients({1, 1, 1});
  gpt::config cp = tiny();
  cp.context_parallel = true;
  check_meshes_follow(want, cp,
                      {gpt::mesh{1, 1, 1}, gpt::mesh{1, 2, 1}, gpt::mesh{1, 2, 2},
                       gpt::mesh{1, 4, 1}, gpt::mesh{1, 3, 2}, gpt::mesh{2, 2, 1},
                       gpt::mesh{2, 2, 2}});
  // Llama's block (rotary positions turned on each rank's block before the gather, SwiGLU),
  // checkpointing every block and overlapping the weights' gathers.
  gpt::config llama = tiny();
  llama.rope = true;
  llama.swiglu = true;
  const gpt_test::run_result llama_want = gradients({1, 1, 1}, tpx::host, llama);
  llama.context_parallel = true;
  llama.checkpoint_every = 1;
  llama.overlap = true;
  check_meshes_follow(llama_want, llama, {gpt::mesh{1, 2, 2}, gpt::mesh{1, 3, 1}});
  // The fused kernels over each rank's block of queries, against the reference attention's 1x1
  // run: blocks of 3 on 2x1 and 2x2, of 2, 2, 1, 1 on 4x1; Llama's block on 2x2 and 3x1.
  gpt::config fused = cp;
  fused.fused_attention = true;
  check_meshes_follow(want, fused,
                      {gpt::mesh{1, 2, 1}, gpt::mesh{1, 2, 2}, gpt::mesh{1, 4, 1},
                       gpt::mesh{2, 2, 2}});
  llama.fused_attention = true;
  check_meshes_follow(llama_want, llama, {gpt::mesh{1, 2, 2}, gpt::mesh{1, 3, 1}});
}

TEST_CASE("GPT with load-balanced context parallelism: every mesh has the 1x1 gradients") {
  // T = 12 in the balanced order over X: 2 chunks of 6 on 1x1, chunks of 3 over 2 ranks (rank 0
  // holding positions 0-2 and 9-11), of 2 over 3; Y splits each rank's block again in the stream.
  // Against the plain model's 1x1 run, positions in order.
  gpt::config c = tiny();
  c.seq = 12;
  const gpt_test::run_result want = gradients({1, 1, 1}, tpx::host, c);
  gpt::config balanced = c;
  balanced.context_parallel = true;
  balanced.fused_attention = true;
  balanced.load_balance = true;
  check_meshes_follow(want, balanced,
                      {gpt::mesh{1, 1, 1}, gpt::mesh{1, 2, 1}, gpt::mesh{1, 2, 2},
                       gpt::mesh{1, 3, 1}, gpt::mesh{1, 3, 2}, gpt::mesh{2, 2, 2}});
  // Llama's block: rotary positions turned by each index's true position, SwiGLU, with
  // checkpointing and overlap.
  gpt::config llama = c;
  llama.rope = true;
  llama.swiglu = true;
  const gpt_test::run_result llama_want = gradients({1, 1, 1}, tpx::host, llama);
  llama.context_parallel = true;
  llama.fused_attention = true;
  llama.load_balance = true;
  llama.checkpoint_every = 1;
  llama.overlap = true;
  check_meshes_follow(llama_want, llama, {gpt::mesh{1, 2, 2}, gpt::mesh{1, 3, 1}});
}

TEST_CASE("GPT training with load-balanced context parallelism on 2x2 follows 1x1; its refusals") {
  check_training_follows_one_rank([](gpt::config& c) {
    c.seq = 8;
    c.context_parallel = true;
    c.fused_attention = true;
    c.load_balance = true;
  });
  gpt::config refused = tiny();
  refused.load_balance = true;
  const auto refuses = [&](const gpt::config& c, const gpt::mesh& mesh, const char* why) {
    tpx::spmd(tpx::host, mesh, [&](auto& rank) {
      CHECK_THROWS_WITH_AS(gpt::model<float>(rank, c), doctest::Contains(why),
                           std::invalid_argument);
    });
  };
  refuses(refused, {1, 1, 1}, "--load-balance orders each sequence's chunks over the ranks of "
                              "context parallelism: add --context-parallel");
  refused.context_parallel = true;
  refuses(refused, {1, 1, 1}, "--load-balance evens out the fused attention's work");
  refused.fused_attention = true;  // T = 6 over X = 2: 4 chunks of 1.5
  refuses(refused, {1, 2, 1}, "--load-balance cuts each sequence into 2 chunks per rank of X: "
                              "--seq 6 is not a multiple of 2 x 2 = 4");
}

TEST_CASE("GPT training with context parallelism on 2x2 follows 1x1; flags it cannot take") {
  check_training_follows_one_rank([](gpt::config& c) { c.context_parallel = true; });
  // A batch is loaded for its model's layout; the model refuses the other's.
  const trainer::text_data data(text, static_cast<int>(tiny().seq));
  gpt::config cp = tiny();
  cp.context_parallel = true;
  tpx::spmd(tpx::host, gpt::mesh{1, 2, 1}, [&](auto& rank) {
    gpt::model_tensors params(rank, cp), grads(rank, cp);
    const gpt::model<float> net(rank, cp);
    CHECK_THROWS_WITH_AS(net.forward_backward(params, gpt::load_batch<tpx::host_space>(
                                                          rank, data, tiny(), 0), grads),
                         doctest::Contains("a batch loaded for data parallelism over X, given to "
                                           "a context-parallel model"),
                         std::invalid_argument);
  });
  gpt::config refused = cp;
  refused.plain_tensor_parallel = true;
  tpx::spmd(tpx::host, gpt::mesh{1, 1, 1}, [&](auto& rank) {
    CHECK_THROWS_WITH_AS(gpt::model<float>(rank, refused),
                         doctest::Contains("--context-parallel needs sequence parallelism"),
                         std::invalid_argument);
  });
}

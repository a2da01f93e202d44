// A dry run of the GPT example's step (tpx::spmd(tpx::dry_run, ...): meta tensors, communicators
// that only count) reads what a real run takes, and nothing less, so that tpx-gpt --dry-run can
// size a mesh without a cluster:
//   - per rank, the tensor memory held between steps and at the step's peak, and every
//     collective's calls and bytes over every set of mesh axes, are those of a real run on the
//     thread backend (dry_run_test_support.hpp), to the byte, on meshes with uneven shards,
//     replicas, checkpointing, both attentions, both MLPs, learned and rotary positions, with and
//     without sequence parallelism, and with context parallelism (both attentions); and so is
//     the part the background tasks move (--overlap on: FSDP's gathers and reduce-scatters of
//     the blocks' weights), with the memory held between steps (the peak then depends on when
//     the communication thread runs the tasks);
//   - the FLOPs its products count, summed over the ranks, are the model's FLOPs as the trainer
//     counts them for MFU (6 per weight and token, plus attention's 12 L T D), plus one forward
//     pass of every block under activation checkpointing; with the fused attention, its products
//     over the causally visible pairs as the kernels run them, blocks of queries too, which the
//     load-balanced order makes the same on every rank of X;
//   - it takes no memory: a step whose tensors need far more than this machine has runs.
// dry_run_test.cpp checks the MLP trainer's, with and without pipeline stages.
#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <vector>

#include "dry_run_test_support.hpp"
#include "gpt_test_support.hpp"

namespace {

using dry_run_test::check_dry_run_reads_the_real_run;
using dry_run_test::host_path_meta_space;
using dry_run_test::total_flops;
using dry_run_test::usage;

gpt::family::config gpt_config(bool fused, int checkpoint_every = 0, bool plain_tp = false) {
  gpt::config c = gpt_test::tiny();
  c.fused_attention = fused;
  c.checkpoint_every = checkpoint_every;
  c.plain_tensor_parallel = plain_tp;
  return c;
}

trainer::run_options<gpt::family> gpt_options(int r, int x, int y, const gpt::config& c) {
  trainer::run_options<gpt::family> o;
  o.model = c;
  o.mesh_r = r;
  o.mesh_x = x;
  o.mesh_y = y;
  o.text = gpt_test::text;
  return o;
}

}  // namespace

TEST_CASE("a dry run of the GPT's step reads the real run's memory and traffic, rank by rank") {
  struct mesh_case {
    int r, x, y;
    bool fused;
    int every;
    bool plain_tp;
  };
  for (const mesh_case m :
       {mesh_case{1, 2, 2, false, 0, false}, mesh_case{1, 2, 2, true, 1, false},
        mesh_case{1, 4, 1, true, 0, false}, mesh_case{1, 1, 4, false, 0, false},
        mesh_case{1, 1, 2, false, 2, true}, mesh_case{2, 2, 2, true, 0, false}}) {
    const auto o = gpt_options(m.r, m.x, m.y, gpt_config(m.fused, m.every, m.plain_tp));
    check_dry_run_reads_the_real_run(o, "GPT on " + trainer::mesh_text(o) +
                                            (m.fused ? ", fused attention" : "") +
                                            ", checkpoint every " + std::to_string(m.every) +
                                            (m.plain_tp ? ", no sequence parallelism" : ""));
  }
  gpt::config swiglu = gpt_config(true, 1);
  swiglu.swiglu = true;
  check_dry_run_reads_the_real_run(gpt_options(1, 2, 2, swiglu),
                                   "GPT with SwiGLU on 2x2, fused attention, checkpoint every 1");
  gpt::config rope = gpt_config(false, 0);
  rope.rope = true;
  check_dry_run_reads_the_real_run(gpt_options(1, 2, 2, rope), "GPT with rotary positions on 2x2");
  gpt::config grouped = gpt_config(false, 0);
  grouped.heads = 6;
  grouped.head_dim = 2;
  grouped.kv_heads = 2;
  check_dry_run_reads_the_real_run(gpt_options(1, 2, 2, grouped),
                                   "GPT with grouped queries (2 key heads of 3) on 2x2");
  grouped.fused_attention = true;
  check_dry_run_reads_the_real_run(gpt_options(1, 1, 4, grouped),
                                   "GPT with grouped queries on 1x4, fused attention");
  gpt::config overlap = gpt_config(true, 1);
  overlap.overlap = true;
  for (const auto& [r, x, y] : {std::tuple{1, 2, 2}, std::tuple{2, 2, 1}}) {
    const auto o = gpt_options(r, x, y, overlap);
    check_dry_run_reads_the_real_run(o, "GPT with overlap on " + trainer::mesh_text(o) +
                                            ", fused attention, checkpoint every 1");
    // FSDP's gathers and reduce-scatters of the blocks' weights run in the background: over X
    // (and R) every rank moves some of its traffic there.
    for (const trainer::step_usage& u : usage<host_path_meta_space>(tpx::dry_run, o))
      for (const tpx::axes_traffic& t : u.background_traffic) {
        INFO("rank " << u.rank << ", axes " << t.axes);
        if (t.axes == "X" || t.axes == "R") CHECK(t.traffic.total().link_bytes > 0);
      }
  }
  gpt::config context = gpt_config(false, 1);
  context.context_parallel = true;
  check_dry_run_reads_the_real_run(gpt_options(2, 2, 2, context),
                                   "GPT with context parallelism on 2x2x2, checkpoint every 1");
  context.fused_attention = true;
  context.checkpoint_every = 0;
  check_dry_run_reads_the_real_run(gpt_options(1, 4, 1, context),
                                   "GPT with context parallelism on 4x1, fused attention");
}

TEST_CASE(
    "the products a GPT dry run counts are the model FLOPs the trainer counts, on every mesh") {
  const gpt::config plain = gpt_config(false);
  const double n = static_cast<double>(plain.batch * plain.seq),
               d = static_cast<double>(plain.d_model()), f = static_cast<double>(plain.ffn),
               t = static_cast<double>(plain.seq);
  SUBCASE(
      "the GPT, reference attention: 6 per weight and token, 12 L T D per token for attention") {
    // Written out here rather than read from gpt::family: Q, K, V, O (4 D^2) and the MLP (2 D F)
    // per block and the head (D V), 2 FLOPs per weight and token forward and 4 backward; QK^T and
    // PV, 2 T D each per token forward (the whole T x T), twice that backward.
    const double model =
        6 * n * (plain.layers * (4 * d * d + 2 * d * f) + d * static_cast<double>(plain.vocab)) +
        12.0 * plain.layers * n * t * d;
    CHECK(gpt::family::flops_per_step(plain) == doctest::Approx(model).epsilon(1e-12));
    for (const auto& [r, x, y] :
         {std::tuple{1, 1, 1}, std::tuple{1, 2, 2}, std::tuple{2, 1, 2}, std::tuple{1, 1, 3}})
      CHECK(total_flops(usage<host_path_meta_space>(tpx::dry_run, gpt_options(r, x, y, plain))) ==
            doctest::Approx(model).epsilon(1e-12));
    // Checkpointing runs every block's forward pass a second time: a third of its FLOPs again.
    const double block_forward = n * 2 * (4 * d * d + 2 * d * f) + 4 * n * t * d;
    CHECK(total_flops(usage<host_path_meta_space>(tpx::dry_run,
                                                  gpt_options(1, 2, 2, gpt_config(false, 1)))) ==
          doctest::Approx(model + plain.layers * block_forward).epsilon(1e-12));
  }
  SUBCASE("the GPT with SwiGLU: a third MLP matrix, 6 D F more per token") {
    gpt::config swiglu = plain;
    swiglu.swiglu = true;
    const double model =
        6 * n * (swiglu.layers * (4 * d * d + 3 * d * f) + d * static_cast<double>(swiglu.vocab)) +
        12.0 * swiglu.layers * n * t * d;
    CHECK(gpt::family::flops_per_step(swiglu) == doctest::Approx(model).epsilon(1e-12));
    for (const auto& [r, x, y] : {std::tuple{1, 1, 1}, std::tuple{1, 2, 2}})
      CHECK(total_flops(usage<host_path_meta_space>(tpx::dry_run, gpt_options(r, x, y, swiglu))) ==
            doctest::Approx(model).epsilon(1e-12));
  }
  SUBCASE("the GPT with grouped queries: K and V of D x (key heads x E), the same attention") {
    gpt::config grouped = plain;
    grouped.heads = 6;
    grouped.head_dim = 2;
    grouped.kv_heads = 2;
    const double kv = 2.0 * 2;  // 2 key heads of width 2
    const double model = 6 * n *
                             (grouped.layers * (2 * d * d + 2 * d * kv + 2 * d * f) +
                              d * static_cast<double>(grouped.vocab)) +
                         12.0 * grouped.layers * n * t * d;
    CHECK(gpt::family::flops_per_step(grouped) == doctest::Approx(model).epsilon(1e-12));
    for (const auto& [r, x, y] : {std::tuple{1, 1, 1}, std::tuple{1, 2, 2}, std::tuple{1, 1, 4}})
      CHECK(total_flops(usage<host_path_meta_space>(tpx::dry_run, gpt_options(r, x, y, grouped))) ==
            doctest::Approx(model).epsilon(1e-12));
  }
  SUBCASE("the GPT, fused attention: its products over the visible pairs only") {
    const gpt::config fused = gpt_config(true);
    const double sequences = static_cast<double>(fused.batch * fused.heads);
    const double pairs = t * (t + 1) / 2, e = static_cast<double>(fused.head_dim);
    const double products =
        tpx::meta_space::forward_attention_products + tpx::meta_space::backward_attention_products;
    const double want =
        6 * n * (fused.layers * (4 * d * d + 2 * d * f) + d * static_cast<double>(fused.vocab)) +
        fused.layers * sequences * pairs * 2 * e * products;
    CHECK(products == 9);  // forward S, O; backward S, dP, dQ and S, dP, dV, dK
    for (const auto& [r, x, y] : {std::tuple{1, 1, 1}, std::tuple{1, 2, 3}})
      CHECK(total_flops(usage<host_path_meta_space>(tpx::dry_run, gpt_options(r, x, y, fused))) ==
            doctest::Approx(want).epsilon(1e-12));
    // Context parallelism: X's blocks of queries see the keys before them too; the ranks' pairs
    // add up to the whole sequence's.
    gpt::config blocks = fused;
    blocks.context_parallel = true;
    for (const auto& [r, x, y] : {std::tuple{1, 2, 1}, std::tuple{1, 3, 2}})
      CHECK(total_flops(usage<host_path_meta_space>(tpx::dry_run, gpt_options(r, x, y, blocks))) ==
            doctest::Approx(want).epsilon(1e-12));
  }
  SUBCASE("the GPT, fused attention in the load-balanced order: every rank of X the same work") {
    // T = 24 over X = 4: contiguous blocks of 6 give the last rank 7 times the first's pairs
    // (6 x 18 + 21 = 129 against 21); the balanced order's chunks of 3 give each rank 3^2 x 7 +
    // 3 x 4 = 75.
    gpt::config blocks = gpt_config(true);
    blocks.seq = 24;
    blocks.context_parallel = true;
    const auto contiguous = usage<host_path_meta_space>(tpx::dry_run, gpt_options(1, 4, 1, blocks));
    CHECK(contiguous[3].matrix_flops > contiguous[0].matrix_flops);
    gpt::config balanced = blocks;
    balanced.load_balance = true;
    for (const int x : {1, 2, 4}) {
      CAPTURE(x);
      const auto ranks = usage<host_path_meta_space>(tpx::dry_run, gpt_options(1, x, 1, balanced));
      for (const trainer::step_usage& u : ranks)
        CHECK(u.matrix_flops == doctest::Approx(ranks[0].matrix_flops).epsilon(1e-12));
      CHECK(total_flops(ranks) == doctest::Approx(total_flops(contiguous)).epsilon(1e-12));
    }
  }
}

TEST_CASE(
    "a dry run takes no memory: a step of tensors far larger than this machine's memory runs") {
  // 2048 sequences of 1024 bytes, D = 1024, F = 4096, a vocabulary of 50304: the logits alone are
  // 2048 x 1024 x 50304 fp32, 393 GiB on one rank.
  gpt::config c;
  c.batch = 2048;
  c.seq = 1024;
  c.heads = 16;
  c.head_dim = 64;
  c.ffn = 4096;
  c.layers = 2;
  c.vocab = 50304;
  c.fused_attention = true;
  const auto ranks = usage<tpx::meta_space>(tpx::dry_run, gpt_options(1, 1, 1, c));
  const double logits = 2048.0 * 1024 * 50304 * 4;
  CHECK(static_cast<double>(ranks[0].peak_bytes) > logits);
  CHECK(ranks[0].matrix_flops > 0);
}

// A dry run of the MLP trainer's step (tpx::spmd(tpx::dry_run, ...): meta tensors, communicators
// that only count), and of it cut into pipeline stages, reads what a real run takes, and nothing
// less, so that tpx-train --dry-run can size a mesh, and tpx-plan price a pipeline, without a
// cluster:
//   - per rank, the tensor memory held between steps and at the step's peak, and every
//     collective's calls and bytes over every set of mesh axes, are those of a real run on the
//     thread backend (dry_run_test_support.hpp), to the byte: on meshes with uneven shards and
//     with checkpointing, and cut into 2 or 4 stages in every schedule, with FSDP and tensor
//     parallelism inside the stages, FSDP's collectives once per step or in every pass, and
//     checkpointing within the pieces (a pipeline's stages differ: the first gathers the
//     embedding, the last the head), and the part of it the background tasks move, with
//     FSDP's collectives or the passes between stages in the background (--overlap on) and not;
//   - the FLOPs its products count, summed over the ranks, are the model's FLOPs as the trainer
//     counts them for MFU (6 per weight and token), on every mesh and cut into stages (plus the
//     one-element sum of each rank's per-stage loss).
// The real run's memory is its memory meter's and its traffic its communicators' (each
// collective's data size and nccl-tests' bus bytes), measured by the same measure_step_usage.
// gpt_dry_run_test.cpp checks the GPT example's.
#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <utility>

#include "dry_run_test_support.hpp"
#include "trainer_test_support.hpp"

namespace {

using dry_run_test::check_dry_run_reads_the_real_run;
using dry_run_test::host_path_meta_space;
using dry_run_test::total_flops;
using dry_run_test::usage;

}  // namespace

TEST_CASE("a dry run of the MLP trainer's step reads the real run's memory and traffic, rank by rank") {
  for (const auto& [x, y, every] : {std::tuple{1, 1, 0}, std::tuple{2, 2, 0}, std::tuple{4, 1, 2}, std::tuple{1, 3, 1}}) {
    trainer::options o = trainer_test::small(x, y, every);
    for (const bool overlap : {false, true}) {
      o.model.overlap = overlap;
      check_dry_run_reads_the_real_run(o, "MLP on " + trainer::mesh_text(o) +
                                              ", checkpoint every " + std::to_string(every) +
                                              (overlap ? ", FSDP in the background" : ""));
    }
  }
}

TEST_CASE("a pipelined MLP's dry run reads the real run's memory and traffic, rank by rank") {
  struct layout {
    int stages, x, y;
    const char* schedule;
    int every;
    bool fsdp_per_pass;
  };
  for (const layout& l :
       {layout{2, 2, 1, "1f1b", 0, false}, layout{2, 1, 2, "zero-bubble-v", 0, false},
        layout{2, 2, 2, "interleaved", 1, false}, layout{2, 2, 1, "zero-bubble", 0, true},
        layout{4, 1, 1, "gpipe", 0, false}}) {
    auto o = trainer_test::pipelined(l.stages, l.x, l.y, l.schedule);
    o.model.checkpoint_every = l.every;
    o.model.fsdp_per_pass = l.fsdp_per_pass;
    for (const bool overlap : {false, true}) {
      o.model.overlap = overlap;
      check_dry_run_reads_the_real_run(o, trainer::mesh_text(o) + ", " + l.schedule +
                                              ", checkpoint every " + std::to_string(l.every) +
                                              (l.fsdp_per_pass ? ", FSDP in every pass" : "") +
                                              (overlap ? ", passes in the background" : ""));
    }
  }
}

TEST_CASE(
    "the products an MLP dry run counts are the model FLOPs the trainer counts, on every mesh") {
  for (const auto& [x, y] : {std::pair{1, 1}, std::pair{2, 2}, std::pair{1, 3}}) {
    const trainer::options o = trainer_test::small(x, y);
    CHECK(total_flops(usage<host_path_meta_space>(tpx::dry_run, o)) ==
          doctest::Approx(trainer::mlp::flops_per_step(o.model)).epsilon(1e-12));
  }
  // Cut into 2 stages of 2x1: each stage's pieces, each microbatch's rows; the same products in
  // all, and on each of the 4 ranks the sum over S of the per-stage losses (tpx::sum<S>: einsum's
  // contraction with ones, of one element, 2 FLOPs).
  for (const char* schedule : {"1f1b", "interleaved", "zero-bubble-v"}) {
    CAPTURE(std::string(schedule));
    const auto o = trainer_test::pipelined(2, 2, 1, schedule);
    CHECK(total_flops(usage<host_path_meta_space>(tpx::dry_run, o)) ==
          doctest::Approx(trainer::pipelined_mlp::flops_per_step(o.model) + 4 * 2).epsilon(1e-12));
  }
}

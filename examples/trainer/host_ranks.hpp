// The host trainers' training loop of one rank (training.hpp's train_rank on a tpx::Rank, the
// rank of the thread and MPI launchers alike) is compiled once per model family and compute type,
// each in a file of its own: host_rank_fp32.cpp and host_rank_bf16.cpp here and in examples/gpt,
// host_rank_pipelined_fp32.cpp and host_rank_pipelined_bf16.cpp for tpx-train --pipeline,
// the object libraries tpx_trainer_ranks and tpx_gpt_ranks (examples/trainer_ranks.cmake) that
// tpx-train, tpx-gpt and the trainer tests link. Before, every program compiled it again: the
// tests' thread runs (tests/trainer/trainer_run.cpp) and MPI runs (tests/mpi/mpi_trainer_runs.cpp)
// each took 110 s in CI's default stage, tpx-train 76 s and tpx-gpt 112 s. Now these four files
// take 28 to 56 s beside the four loops' 41 to 69 s: about the same in all (382 s against 408 s),
// but a machine of 3 cores or more builds a program's loops beside its own file, so tpx-train
// and tpx-gpt rebuild in the time of their longest file.
//
// TPX_TRAINER_HOST_RANK(Tc, Family) names one as an explicit instantiation does: `extern
// template TPX_TRAINER_HOST_RANK(float, trainer::mlp);` where it is used (below for the MLP,
// gpt/host_ranks.hpp for the GPT), `template TPX_TRAINER_HOST_RANK(float, trainer::mlp);` in the
// file that compiles it.
#pragma once

#include "pipelined_family.hpp"
#include "training.hpp"

#define TPX_TRAINER_HOST_RANK(Tc, Family)                            \
  void trainer::train_rank<Tc, Family, tpx::Rank<Family::mesh>>(     \
      tpx::Rank<Family::mesh>&, const trainer::run_options<Family>&, \
      const trainer::checkpointing&, const trainer::text_data&,      \
      const std::function<void(const trainer::step_report&)>&)

extern template TPX_TRAINER_HOST_RANK(float, trainer::mlp);
extern template TPX_TRAINER_HOST_RANK(tpx::bf16, trainer::mlp);
extern template TPX_TRAINER_HOST_RANK(float, trainer::pipelined_mlp);
extern template TPX_TRAINER_HOST_RANK(tpx::bf16, trainer::pipelined_mlp);

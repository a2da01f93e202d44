// The host trainers' training loop of one rank (training.hpp's train_rank on a tpx::Rank, the
// rank of the thread and MPI launchers alike) is compiled once per model family and compute type,
// each in a file of its own: host_rank_fp32.cpp and host_rank_bf16.cpp here and in examples/gpt,
// the object library tpx_trainer_host_ranks (examples/trainer_ranks.cmake) that tpx-train, tpx-gpt
// and the trainer tests link. It was most of each trainer's compile time: with both cores busy,
// tpx-train's one file took 87 s and is now 53 s beside two halves of 37 and 40 s, which a machine
// of 3 cores or more builds in parallel; the tests' instantiations of the thread and MPI runs
// (tests/trainer/trainer_run.cpp, tests/mpi/mpi_trainer_runs.cpp) went from 133 and 106 s to 27
// and 24 s, as they compile no loop again. The CUDA trainers do the same (cuda_ranks.hpp).
//
// TPX_TRAINER_HOST_RANK(Tc, Family) names one as an explicit instantiation does: `extern
// template TPX_TRAINER_HOST_RANK(float, trainer::mlp);` where it is used (below for the MLP,
// gpt/host_ranks.hpp for the GPT), `template TPX_TRAINER_HOST_RANK(float, trainer::mlp);` in the
// file that compiles it.
#pragma once

#include "training.hpp"

#define TPX_TRAINER_HOST_RANK(Tc, Family) \
  TPX_TRAINER_TRAIN_RANK(Tc, Family, tpx::Rank<Family::mesh>)

extern template TPX_TRAINER_HOST_RANK(float, trainer::mlp);
extern template TPX_TRAINER_HOST_RANK(tpx::bf16, trainer::mlp);

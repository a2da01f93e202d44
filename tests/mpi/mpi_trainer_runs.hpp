// The trainers under mpirun (a process per rank) as the MPI tests run them, compiled once in
// mpi_trainer_runs.cpp (object library tpx_mpi_trainer_runs) instead of in every test that runs
// them: tpx-train's (mpi_trainer_test, mpi_checkpoint_test), with --pipeline (mpi_trainer_test)
// and tpx-gpt's (mpi_trainer_test).
#pragma once

#include <tpx/spmd/spmd_mpi.hpp>

#include "../trainer/gpt_test_support.hpp"
#include "../trainer/trainer_test_support.hpp"

extern template TPX_TRAINER_RUN(trainer::mlp, tpx::mpi_backend);
extern template TPX_TRAINER_RUN(trainer::pipelined_mlp, tpx::mpi_backend);
extern template TPX_TRAINER_RUN(gpt::family, tpx::mpi_backend);

// The trainers under mpirun (a process per rank) as the MPI tests run them, compiled once in
// mpi_trainer_runs.cpp (object library tpx_mpi_trainer_runs) instead of in every test that runs
// them: tpx-train's (mpi_trainer_test, mpi_checkpoint_test) and tpx-gpt's (mpi_trainer_test).
#pragma once

#include <functional>
#include <tpx/spmd/spmd_mpi.hpp>

#include "../trainer/gpt_test_support.hpp"
#include "../trainer/trainer_test_support.hpp"

extern template void trainer::run<trainer::mlp, tpx::mpi_backend>(
    const trainer::options&, const std::function<void(const trainer::step_report&)>&,
    tpx::mpi_backend, const std::function<void()>&);

extern template void trainer::run<gpt::family, tpx::mpi_backend>(
    const trainer::run_options<gpt::family>&,
    const std::function<void(const trainer::step_report&)>&, tpx::mpi_backend,
    const std::function<void()>&);

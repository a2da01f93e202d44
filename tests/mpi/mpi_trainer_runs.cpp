// The instantiations declared in mpi_trainer_runs.hpp.
#include "mpi_trainer_runs.hpp"

template void trainer::run<trainer::mlp, tpx::mpi_backend>(
    const trainer::options&, const std::function<void(const trainer::step_report&)>&,
    tpx::mpi_backend, const std::function<void()>&);

template void trainer::run<gpt::family, tpx::mpi_backend>(
    const trainer::run_options<gpt::family>&,
    const std::function<void(const trainer::step_report&)>&, tpx::mpi_backend,
    const std::function<void()>&);

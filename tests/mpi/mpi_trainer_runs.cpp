// The instantiations declared in mpi_trainer_runs.hpp.
#include "mpi_trainer_runs.hpp"

// The trainers find how the processes agree on a checkpoint folder through processes_of(launcher):
// spmd_mpi.hpp alone (what this file includes of MPI) must bring tpx::mpi's, or the runs below
// would refuse --ckpt-dir (mpi_checkpoint_test).
static_assert(requires { processes_of(tpx::mpi); });

template TPX_TRAINER_RUN(trainer::mlp, tpx::mpi_backend);
template TPX_TRAINER_RUN(trainer::pipelined_mlp, tpx::mpi_backend);
template TPX_TRAINER_RUN(gpt::family, tpx::mpi_backend);

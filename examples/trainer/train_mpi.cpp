// tpx-train-mpi: the example FSDP + TP trainer with one MPI process per rank, for
// `mpirun -np <X*Y> tpx-train-mpi --mesh XxY ...` on one machine or many. The flags, progress
// lines and log are tpx-train's (cli.hpp); the processes other than world rank 0 print nothing
// (their standard output goes to /dev/null; errors still reach standard error). The loss curve is
// the thread backend's bit for bit (tests/mpi/mpi_trainer_test.cpp).
//
//   mpirun -np 4 tpx-train-mpi --mesh 2x2 --steps 300 --log train.jsonl
//
// Checkpoints are not offered yet: every process would take the folder's lock (one writer per
// folder, io/directory_lock.hpp), so --ckpt-dir is refused with that reason.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <tpx/spmd/spmd_mpi.hpp>

#include "cli.hpp"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--ckpt-dir", 10) == 0 || std::strcmp(argv[i], "--resume") == 0) {
      std::fprintf(stderr,
                   "tpx-train-mpi: %s: checkpoints under MPI are not supported yet (every "
                   "process would lock the folder); use tpx-train for checkpointed runs\n",
                   argv[i]);
      return 2;
    }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  const int status = trainer::train_main<trainer::mlp>(
      argc, argv, "tpx-train-mpi", "one MPI process per rank", trainer::backend{"mpi", tpx::mpi});
  MPI_Finalize();
  return status;
}

// The main of the host example trainers, tpx-train and tpx-gpt: one program, any launch
// (issue 10). Started alone, the ranks are threads of the process (tpx::host). Started by an MPI
// launcher (tpx::started_by_mpi(): `mpirun -np 4 tpx-train --mesh 2x2`), each process is one
// rank (tpx::mpi): the flags, progress lines and log are the same, only world rank 0 prints (the
// others' standard output goes to /dev/null; errors still reach standard error), and the losses
// are the thread backend's bit for bit (tests/mpi/mpi_program_test.cpp). A build without MPI
// (TPX_MPI=OFF; CMake defines TPX_EXAMPLES_MPI when it found MPI) refuses to run under mpirun
// rather than train X*Y separate copies of the model.
//
// Checkpoints are not offered under MPI yet: every process would take the folder's lock (one
// writer per folder, io/directory_lock.hpp), so --ckpt-dir and --resume are refused there.
#pragma once

#include <cstdio>
#include <cstring>
#include <tpx/launch/started_by_mpi.hpp>

// Before cli.hpp: its calls tpx::spmd(launcher, ...) are qualified, so they see only the
// overloads declared before them.
#ifdef TPX_EXAMPLES_MPI
#include <mpi.h>

#include <tpx/spmd/spmd_mpi.hpp>
#endif

#include "cli.hpp"

namespace trainer {

#ifdef TPX_EXAMPLES_MPI
// This process's rank of an MPI job.
template <class Family>
int mpi_main(int argc, char** argv, const char* program) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--ckpt-dir", 10) == 0 || std::strcmp(argv[i], "--resume") == 0) {
      std::fprintf(stderr,
                   "%s: %s: checkpoints under MPI are not supported yet (every process would "
                   "lock the folder); run it without mpirun for checkpointed runs\n",
                   program, argv[i]);
      return 2;
    }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  const int status =
      train_main<Family>(argc, argv, program, "one MPI process per rank", backend{"mpi", tpx::mpi});
  MPI_Finalize();
  return status;
}
#endif

// Threads, or MPI processes when an MPI launcher started the program (see the top).
template <class Family>
int launch_main(int argc, char** argv, const char* program) {
  if (const char* variable = tpx::mpi_launcher_variable()) {
#ifdef TPX_EXAMPLES_MPI
    (void)variable;
    return mpi_main<Family>(argc, argv, program);
#else
    std::fprintf(stderr,
                 "%s: started by an MPI launcher (%s is set), but built without MPI (TPX_MPI=OFF): "
                 "every process would train alone. Rebuild where CMake finds MPI, or start it "
                 "without mpirun (its ranks are then threads)\n",
                 program, variable);
    return 2;
#endif
  }
  return train_main<Family>(argc, argv, program, "one thread per rank (under mpirun: one process)",
                            backend{"threads", tpx::host});
}

}  // namespace trainer

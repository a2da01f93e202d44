// What the trainers' mains (launch_main.hpp for tpx-train and tpx-gpt, cuda_main.hpp for their
// CUDA twins) do when a launcher starts one process per rank: only world rank 0 prints, so that
// the progress lines and the log come once (the others' standard output goes to /dev/null; their
// errors still reach standard error), and under an MPI launcher MPI is started before training
// and finalized after it.
#pragma once

#include <cstdio>

#ifdef TPX_EXAMPLES_MPI
#include <mpi.h>
#endif

namespace trainer {

// Whether this process may go on: world rank 0 keeps its standard output, the others' is
// discarded (false if /dev/null cannot be opened).
inline bool only_rank_0_prints(int world_rank) {
  return world_rank == 0 || std::freopen("/dev/null", "w", stdout) != nullptr;
}

#ifdef TPX_EXAMPLES_MPI
// Runs main_of_rank(world size) as this process's part of an MPI job; returns its exit code.
template <class Main>
int as_mpi_process(int& argc, char**& argv, Main&& main_of_rank) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, processes = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  const int status = only_rank_0_prints(rank) ? main_of_rank(processes) : 1;
  MPI_Finalize();
  return status;
}
#endif

}  // namespace trainer

// What the trainers' mains (launch_main.hpp for tpx-train and tpx-gpt, cuda_main.hpp for their
// CUDA twins) do when a launcher starts one process per rank: only world rank 0 prints, so that
// the progress lines and the log come once (the others' standard output goes to /dev/null; their
// errors still reach standard error), and under an MPI launcher MPI is started before training
// and finalized after it.
//
// A process that fails outside the SPMD program, where spmd(tpx::mpi) cannot see it (its node
// does not see the checkpoint folder the first process created, say), would leave the others
// waiting for it in their collectives until their timeout, and itself in MPI_Finalize with
// them, or, under srun without --kill-on-bad-exit, the job hanging. So every process meets the
// others in a barrier before finalizing: one that failed waits for it at most
// failed_process_grace and then ends the job with MPI_Abort; when all fail alike (a bad flag,
// a folder locked by another job) they meet at once and each has printed its own message.
// Processes that succeeded wait without a limit, as MPI_Finalize would.
#pragma once

#include <chrono>
#include <cstdio>
#include <thread>

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
inline constexpr std::chrono::seconds failed_process_grace{10};

// Whether every process of the job reached this barrier; a process that failed (status != 0)
// waits for the others at most failed_process_grace.
inline bool all_processes_finished(int status) {
  MPI_Request barrier;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &barrier) != MPI_SUCCESS) return false;
  const auto give_up = std::chrono::steady_clock::now() + failed_process_grace;
  for (int done = 0;;) {
    if (MPI_Test(&barrier, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    if (status != 0 && std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Runs main_of_rank(world size) as this process's part of an MPI job; returns its exit code.
template <class Main>
int as_mpi_process(int& argc, char**& argv, Main&& main_of_rank) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, processes = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  const int status = only_rank_0_prints(rank) ? main_of_rank(processes) : 1;
  if (!all_processes_finished(status)) {
    std::fprintf(stderr,
                 "MPI process %d failed while other processes of the job were still running "
                 "(waited %lld s for them): ending the job\n",
                 rank, static_cast<long long>(failed_process_grace.count()));
    MPI_Abort(MPI_COMM_WORLD, status != 0 ? status : 1);
  }
  MPI_Finalize();
  return status;
}
#endif

}  // namespace trainer

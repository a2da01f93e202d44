// ensure_mpi_initialized: MPI is started once per process, by the program or else by tpx, and
// finalized at exit only by whoever started it.
//
// A program may call MPI_Init itself (to use MPI beside tpx) or leave it to tpx's MPI launcher.
// The first call here initializes MPI unless it already is, asking for MPI_THREAD_SERIALIZED
// (tpx calls MPI from one thread at a time, not necessarily the main one), and, only then,
// registers MPI_Finalize to run at exit (a function-local static's destructor), after every
// communicator of the launcher is freed. A program that initialized MPI finalizes it itself.
#pragma once

#include <mpi.h>

#include "tpx/comm/communicator.hpp"

namespace tpx::detail {

class MpiEnvironment {
 public:
  MpiEnvironment() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      throw comm_error("tpx: MPI_Init_thread failed");
    owned_ = true;
  }
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
  ~MpiEnvironment() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Finalize();
  }

 private:
  bool owned_ = false;
};

inline void ensure_mpi_initialized() { static const MpiEnvironment environment; }

}  // namespace tpx::detail

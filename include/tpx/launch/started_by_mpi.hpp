// started_by_mpi(): whether an MPI launcher started this process, from the variables the
// launchers give every process they start, so that one program can run its ranks as threads when
// started alone and as MPI processes under mpirun, with no second build (issue 10: "one program,
// any launch"; examples/trainer/launch_main.hpp, bench/collectives.cpp).
//
//   OMPI_COMM_WORLD_SIZE   Open MPI's mpirun / mpiexec
//   PMIX_RANK              PMIx launchers: Open MPI 5's prterun, srun --mpi=pmix
//   PMI_RANK               PMI launchers: MPICH's and Intel MPI's Hydra, srun --mpi=pmi2
//   MV2_COMM_WORLD_SIZE    MVAPICH2's mpirun_rsh
//
// torchrun and a plain srun set none of them: their processes are not an MPI job
// (launch/launch_environment.hpp reads their variables).
#pragma once

#include <cstdlib>
#include <functional>

namespace tpx {

// The first of the variables above that is set, or nullptr: which launcher it was, for messages.
inline const char* mpi_launcher_variable(const std::function<const char*(const char*)>& get =
                                             [](const char* name) { return std::getenv(name); }) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_SIZE"})
    if (get(name) != nullptr) return name;
  return nullptr;
}

inline bool started_by_mpi() { return mpi_launcher_variable() != nullptr; }

}  // namespace tpx

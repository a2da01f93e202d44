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
//
// mpi_launch_command(n) is how to start n processes with the launcher that started this one, for
// the messages that tell a user to start another number: srun's own flags inside an srun job
// step, mpirun's elsewhere.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>

namespace tpx {

// The first of the variables above that is set, or nullptr: which launcher it was, for messages.
inline const char* mpi_launcher_variable(const std::function<const char*(const char*)>& get =
                                             [](const char* name) { return std::getenv(name); }) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_SIZE"})
    if (get(name) != nullptr) return name;
  return nullptr;
}

inline bool started_by_mpi() { return mpi_launcher_variable() != nullptr; }

// "srun -n 4 --mpi=pmix" (or --mpi=pmi2, as PMI_RANK says) for a process of an srun job step
// (SLURM_STEP_ID, or older Slurm's SLURM_STEPID), "mpirun -np 4" otherwise.
inline std::string mpi_launch_command(
    int processes, const std::function<const char*(const char*)>& get = [](const char* name) {
      return std::getenv(name);
    }) {
  const bool srun_step = get("SLURM_STEP_ID") != nullptr || get("SLURM_STEPID") != nullptr;
  // Appended, not `"srun -n " + std::to_string(...)`: GCC 12 -O3 -Wrestrict
  std::string command = srun_step ? "srun -n " : "mpirun -np ";
  command += std::to_string(processes);
  if (srun_step) {
    const char* variable = mpi_launcher_variable(get);
    const bool pmi2 = variable != nullptr && std::string_view(variable) == "PMI_RANK";
    command += pmi2 ? " --mpi=pmi2" : " --mpi=pmix";
  }
  return command;
}

}  // namespace tpx

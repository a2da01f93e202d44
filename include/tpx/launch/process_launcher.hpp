// process_launcher_from(): which launcher started this process, from the variables launchers
// give every process they start, so that one program can pick how its ranks run with no second
// build (issue 10: "one program, any launch"; examples/trainer/cuda_main.hpp):
//
//   mpi       an MPI launcher: mpirun, Hydra, srun --mpi=... (started_by_mpi.hpp's variables)
//   torchrun  torchrun (RANK), and anything else that sets torchrun's variables
//   srun      SLURM's srun without MPI (SLURM_PROCID)
//   alone     none of them: the program's ranks are its own threads
//
// MPI wins over the others (srun --mpi=pmix sets SLURM_PROCID too, and its processes are an MPI
// job), and torchrun over srun (torchrun inside a SLURM allocation), as launch_environment.hpp
// reads them. `variable` names the variable that decided, for messages.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>

#include "tpx/launch/started_by_mpi.hpp"

namespace tpx {

struct process_launcher {
  enum kind { alone, mpi, torchrun, srun } kind = alone;
  const char* variable = nullptr;  // the variable that says so; nullptr when alone

  // "torchrun (RANK is set)", for messages.
  std::string describe() const {
    static constexpr const char* names[] = {"no launcher", "an MPI launcher", "torchrun", "srun"};
    return std::string(names[kind]) +
           (variable ? " (" + std::string(variable) + " is set)" : std::string());
  }
};

inline process_launcher process_launcher_from(const std::function<const char*(const char*)>& get =
                                                  [](const char* name) {
                                                    return std::getenv(name);
                                                  }) {
  if (const char* variable = mpi_launcher_variable(get)) return {process_launcher::mpi, variable};
  if (get("RANK") != nullptr) return {process_launcher::torchrun, "RANK"};
  if (get("SLURM_PROCID") != nullptr) return {process_launcher::srun, "SLURM_PROCID"};
  return {};
}

}  // namespace tpx

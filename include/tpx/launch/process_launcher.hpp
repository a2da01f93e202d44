// process_launcher_from(): which launcher started this process, from the variables launchers
// give every process they start, so that one program can pick how its ranks run with no second
// build (issue 10: "one program, any launch"; examples/trainer/cuda_main.hpp):
//
//   mpi       an MPI launcher: mpirun, Hydra, srun --mpi=... (started_by_mpi.hpp's variables)
//   torchrun  torchrun (RANK), and anything else that sets torchrun's variables
//   srun      SLURM's srun without MPI (SLURM_PROCID in a job step: SLURM_STEP_ID)
//   alone     none of them: the program's ranks are its own threads
//
// MPI wins over the others (srun --mpi=pmix sets SLURM_PROCID too, and its processes are an MPI
// job), and torchrun over srun (torchrun inside a SLURM allocation), as launch_environment.hpp
// reads them. A program that a batch script runs directly, without srun, is alone: the batch
// script has SLURM_PROCID=0 and the allocation's SLURM_NTASKS too, but no SLURM_STEP_ID (Slurm
// sets it in the environment of a job step's tasks only; the batch script is not one), and taking
// it for task 0 of an srun launch would wait for tasks that never start. `variable` names the
// variable that decided, for messages.
//
// srun_step_variable() says whether this process is a task of an srun step (launch_environment.hpp
// asks it too, so both agree), and world_size_variable() names the variable that counts a torchrun
// or srun launch's processes.
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

// The variable that makes this process a task of an srun job step: SLURM_STEP_ID, or older
// Slurm's SLURM_STEPID, beside SLURM_PROCID; nullptr when there is none (a batch script's own
// process has SLURM_PROCID but no step).
inline const char* srun_step_variable(const std::function<const char*(const char*)>& get) {
  if (get("SLURM_PROCID") == nullptr) return nullptr;
  for (const char* step : {"SLURM_STEP_ID", "SLURM_STEPID"})
    if (get(step) != nullptr) return step;
  return nullptr;
}

inline process_launcher process_launcher_from(const std::function<const char*(const char*)>& get =
                                                  [](const char* name) {
                                                    return std::getenv(name);
                                                  }) {
  if (const char* variable = mpi_launcher_variable(get)) return {process_launcher::mpi, variable};
  if (get("RANK") != nullptr) return {process_launcher::torchrun, "RANK"};
  if (const char* step = srun_step_variable(get)) return {process_launcher::srun, step};
  return {};
}

// The variable that holds the number of processes of a launch by `launcher` (torchrun or srun):
// torchrun's WORLD_SIZE; under srun the step's SLURM_STEP_NUM_TASKS, or SLURM_NTASKS where an
// older srun lacks it (srun --preserve-env leaves SLURM_NTASKS at the allocation's count).
inline const char* world_size_variable(enum process_launcher::kind launcher,
                                       const std::function<const char*(const char*)>& get) {
  if (launcher != process_launcher::srun) return "WORLD_SIZE";
  return get("SLURM_STEP_NUM_TASKS") != nullptr ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
}

}  // namespace tpx

// The host trainers' refusal of a torchrun or srun launch (examples/trainer/host_launch.hpp),
// checked with fake environments as launch_main.hpp reads them: under torchrun or srun in a launch
// of several processes, or of a size it cannot read, the sentence names the launcher, the size and
// the way out; a launch of one process, a program started alone, and a batch script that runs it
// directly (SLURM's variables without a job step) go on.
#include "../../examples/trainer/host_launch.hpp"

#include <doctest/doctest.h>

#include <string>

#include "../support/environment_table.hpp"
#include "../support/message_of.hpp"

namespace {

// What check_host_launch says for tpx-train started in `env`.
std::string verdict(const environment_table& env) {
  return message_of([&] {
    trainer::check_host_launch(tpx::process_launcher_from(lookup_in(env)), "tpx-train",
                               lookup_in(env));
  });
}

}  // namespace

TEST_CASE("under torchrun or srun with several processes, the host trainer refuses, saying why") {
  CHECK(verdict({{"RANK", "2"}, {"WORLD_SIZE", "4"}}) ==
        "started by torchrun (RANK is set) as one of several processes (WORLD_SIZE=4), each of "
        "which would train every rank of the mesh on its own threads. tpx-train's ranks are the "
        "threads of one process (start it alone: --mesh 2x2 runs 4 threads) or MPI processes "
        "(mpirun or srun --mpi=pmix, in a build with MPI); tpx-train-cuda runs one process per GPU "
        "under torchrun or srun");
  CHECK(verdict({{"RANK", "0"}}).find("(WORLD_SIZE is not set)") != std::string::npos);
  CHECK(verdict({{"RANK", "0"}, {"WORLD_SIZE", "1x"}}).find("(WORLD_SIZE=1x)") !=
        std::string::npos);
  CHECK(verdict({{"SLURM_PROCID", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "4"}})
            .starts_with("started by srun (SLURM_STEP_ID is set) as one of several processes "
                         "(SLURM_STEP_NUM_TASKS=4), each of which would train every rank"));
  CHECK(verdict({{"SLURM_PROCID", "0"}, {"SLURM_STEPID", "0"}, {"SLURM_NTASKS", "2"}})
            .find("(SLURM_NTASKS=2)") != std::string::npos);
}

TEST_CASE("alone, in a launch of one process, or run by a batch script, the host trainer runs") {
  CHECK(verdict({}).empty());
  CHECK(verdict({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).empty());
  CHECK(verdict({{"SLURM_PROCID", "0"},
                 {"SLURM_STEP_ID", "0"},
                 {"SLURM_STEP_NUM_TASKS", "1"},
                 {"SLURM_NTASKS", "8"}})
            .empty());  // srun -n 1 in an allocation of 8 tasks
  CHECK(verdict({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}).empty());  // the batch script
}

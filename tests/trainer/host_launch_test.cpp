// The host trainers' refusal of a torchrun launch (examples/trainer/host_launch.hpp), checked with
// fake environments as launch_main.hpp reads them: under torchrun in a launch of several
// processes, or of a size it cannot read, the sentence names the launcher, the size and the way
// out; a launch of one process, a program started alone, and srun's variables (also a batch
// script's) go on.
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

TEST_CASE("under torchrun with several processes, the host trainer refuses, saying what to run") {
  CHECK(verdict({{"RANK", "2"}, {"WORLD_SIZE", "4"}}) ==
        "started by torchrun (RANK is set) as one of several processes (WORLD_SIZE=4), each of "
        "which would train every rank of the mesh on its own threads. tpx-train's ranks are the "
        "threads of one process (start it alone: --mesh 2x2 runs 4 threads) or MPI processes "
        "(mpirun, in a build with MPI); tpx-train-cuda runs one process per GPU under torchrun");
  CHECK(verdict({{"RANK", "0"}}).find("(WORLD_SIZE is not set)") != std::string::npos);
  CHECK(verdict({{"RANK", "0"}, {"WORLD_SIZE", "1x"}}).find("(WORLD_SIZE=1x)") !=
        std::string::npos);
}

TEST_CASE("alone, in a torchrun launch of one process, or under srun, the host trainer runs") {
  CHECK(verdict({}).empty());
  CHECK(verdict({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).empty());
  CHECK(verdict({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}).empty());
}

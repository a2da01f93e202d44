// The CUDA trainers' choice of how to run, from how they were started (examples/trainer/
// cuda_launch.hpp; issue 10, "one program, any launch"), checked on the host with fake
// environments, as cuda_main.hpp reads them before touching a GPU:
//  - --backend is read from the command line in both of its spellings;
//  - alone, any backend runs; under torchrun or srun, nccl (or no --backend) runs in a launch of
//    any size and simulated only in a launch of one process, else the sentence says why and what
//    to do; under mpirun a build without MPI is refused naming the variable, a build with it runs
//    as under torchrun.
#include "../../examples/trainer/cuda_launch.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "../support/environment_table.hpp"
#include "../support/message_of.hpp"

namespace {

std::optional<std::string> flag_of(const std::vector<const char*>& args) {
  return trainer::backend_flag(static_cast<int>(args.size()), args.data());
}

// What check_cuda_launch says for a process started in `env`, in a launch of `processes`.
std::string verdict(const environment_table& env, int processes,
                    const std::optional<std::string>& backend, bool built_with_mpi = true) {
  return message_of([&] {
    trainer::check_cuda_launch(tpx::process_launcher_from(lookup_in(env)), processes, backend,
                               built_with_mpi);
  });
}

const environment_table torchrun{{"RANK", "1"},
                                 {"WORLD_SIZE", "4"},
                                 {"LOCAL_RANK", "1"},
                                 {"MASTER_ADDR", "node0"},
                                 {"MASTER_PORT", "29500"}};
const environment_table srun{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}};
const environment_table mpirun{{"PMI_RANK", "0"}};

}  // namespace

TEST_CASE("--backend is read before the command line is parsed, in both spellings") {
  CHECK(flag_of({"tpx-train-cuda", "--mesh", "2x2", "--backend", "nccl"}) == "nccl");
  CHECK(flag_of({"tpx-train-cuda", "--backend=simulated", "--steps", "5"}) == "simulated");
  CHECK(flag_of({"tpx-train-cuda", "--mesh", "1x1"}) == std::nullopt);
  CHECK(flag_of({"tpx-train-cuda", "--backend"}) == std::nullopt);  // the parser says it is missing
}

TEST_CASE("started alone, every backend runs") {
  for (const auto& backend : {std::optional<std::string>(), std::optional<std::string>("simulated"),
                              std::optional<std::string>("nccl")})
    CHECK(verdict({}, 1, backend, false).empty());
}

TEST_CASE("under torchrun or srun, NCCL runs; simulated only in a launch of one process") {
  CHECK(verdict(torchrun, 4, std::nullopt).empty());
  CHECK(verdict(torchrun, 4, "nccl").empty());
  CHECK(verdict(torchrun, 1, "simulated").empty());
  CHECK(verdict(srun, 2, "nccl", false).empty());  // no MPI needed: the id travels over TCP
  CHECK(verdict(torchrun, 4, "simulated") ==
        "--backend simulated: started by torchrun (RANK is set) as one of 4 processes, each of "
        "which would train every rank of the mesh on one GPU on its own. Under a launcher each "
        "process is one rank over NCCL (--backend nccl, the default there); to simulate the mesh "
        "on one GPU, start the program alone");
  CHECK(
      verdict(srun, 2, "simulated")
          .starts_with(
              "--backend simulated: started by srun (SLURM_STEP_ID is set) as one of 2 processes"));
}

TEST_CASE("under mpirun, a build without MPI is refused; with MPI, NCCL runs") {
  CHECK(verdict(mpirun, 0, std::nullopt, false) ==
        "started by an MPI launcher (PMI_RANK is set), but built without MPI (TPX_MPI=OFF), which "
        "would carry NCCL's id to the processes of an MPI job: start it with torchrun or srun "
        "(the id then travels over TCP to MASTER_ADDR), or rebuild where CMake finds MPI");
  CHECK(verdict(mpirun, 4, "nccl").empty());
  CHECK(verdict(mpirun, 1, "simulated").empty());
  CHECK(verdict(mpirun, 4, "simulated")
            .starts_with("--backend simulated: started by an MPI launcher (PMI_RANK is set) as one "
                         "of 4 processes"));
}

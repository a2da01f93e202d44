// Whether a CUDA trainer's command line can run under the launch that started it (issue 10: one
// program, any launch), checked before anything touches a GPU, NCCL or MPI. Host-only, so that
// tests/trainer/cuda_launch_test.cpp checks every case and message without a GPU; cuda_main.hpp
// then runs the ranks as the launcher (launch/process_launcher.hpp) says:
//   alone           every rank in this process: --backend simulated (the default: all ranks on
//                   one GPU, spmd(tpx::cuda_simulated, ...)) or nccl (a GPU per rank,
//                   spmd(tpx::cuda_devices, ...))
//   torchrun, srun  this process is one rank over NCCL, on GPU LOCAL_RANK (SLURM_LOCALID) or the
//                   one GPU srun bound to it (launch/local_device.hpp), NCCL's id from rank 0
//                   over the TCP rendezvous at MASTER_ADDR (spmd(tpx::cuda_launched, ...))
//   mpirun          this process is one rank over NCCL, on its node's next GPU, the id by MPI
//                   (spmd(tpx::cuda_mpi, ...)); a build without MPI refuses it
// Under a launcher --backend nccl is the default, and simulated runs only in a launch of one
// process: in a larger one every process would train the whole mesh on its own.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tpx/launch/process_launcher.hpp>

namespace trainer {

// The value given to --backend ("--backend V" or "--backend=V"), read before the command line is
// parsed (the parser checks it again); nothing when absent.
inline std::optional<std::string> backend_flag(int argc, const char* const* argv) {
  std::optional<std::string> value;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--backend" && i + 1 < argc)
      value = argv[++i];
    else if (arg.starts_with("--backend="))
      value = std::string(arg.substr(std::string_view("--backend=").size()));
  }
  return value;
}

// Throws std::invalid_argument with the sentence for the user when --backend `backend` cannot run
// in a launch of `processes` processes started by `started`, in a build with or without MPI.
inline void check_cuda_launch(const tpx::process_launcher& started, int processes,
                              const std::optional<std::string>& backend, bool built_with_mpi) {
  if (started.kind == tpx::process_launcher::alone) return;
  if (started.kind == tpx::process_launcher::mpi && !built_with_mpi)
    throw std::invalid_argument(
        "started by " + started.describe() +
        ", but built without MPI (TPX_MPI=OFF), which would carry NCCL's id to the processes of "
        "an MPI job: start it with torchrun or srun (the id then travels over TCP to MASTER_ADDR), "
        "or rebuild where CMake finds MPI");
  if (backend == "simulated" && processes > 1)
    throw std::invalid_argument(
        "--backend simulated: started by " + started.describe() + " as one of " +
        std::to_string(processes) +
        " processes, each of which would train every rank of the mesh on one GPU on its own. "
        "Under a launcher each process is one rank over NCCL (--backend nccl, the default "
        "there); to simulate the mesh on one GPU, start the program alone");
}

}  // namespace trainer

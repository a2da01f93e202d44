// The main of the CUDA example trainers, tpx-train-cuda (the MLP) and tpx-gpt-cuda (the GPT
// example): their tensors in device memory and their whole step on the GPU, with the flags,
// progress lines and log of the host programs (cli.hpp). One program, any launch (issue 10):
//   started alone, two ways to run the ranks (--backend):
//     simulated  (default) every rank of the mesh a thread with its own stream on ONE GPU
//                (spmd(tpx::cuda_simulated, ...)), collectives as device-to-device copies and
//                reduction kernels: any mesh on one GPU
//     nccl       one GPU per rank, collectives over NCCL (spmd(tpx::cuda_devices, ...)): needs as
//                many GPUs as ranks; --mesh 1x1 runs every NCCL call on a single GPU
//   started by torchrun or srun: this process is one rank over NCCL on GPU LOCAL_RANK (or the one
//     GPU srun bound to it: launch/local_device.hpp), NCCL's id through the TCP rendezvous
//     (spmd(tpx::cuda_launched, ...)); checkpoints as on the host, world rank 0's decisions about
//     the folder over the same port (launch/tcp_processes.hpp)
//   started by mpirun (a build with MPI): one rank over NCCL per process, the id through MPI
//     (spmd(tpx::cuda_mpi, ...)); checkpoints as on the host (training.hpp)
// Under a launcher only world rank 0 prints, and the launch is checked first (cuda_launch.hpp).
// Without a CUDA device it still answers what needs none (--help, a refused flag, and --dry-run:
// sizing a GPU run from a login node or a laptop); a command line that would train says there is
// no device and exits with 77, the project's "skipped" status.
#pragma once

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <tpx/cuda/cuda.hpp>
#include <tpx/cuda/nccl_launch.hpp>
#include <tpx/launch/launch_environment.hpp>
#include <tpx/launch/process_launcher.hpp>

// Before cli.hpp: its calls tpx::spmd(launcher, ...) are qualified, so they see only the
// overloads declared before them.
#ifdef TPX_EXAMPLES_MPI
#include <tpx/cuda/nccl_mpi_launch.hpp>
#endif

#include "cli.hpp"
#include "cuda_launch.hpp"
#include "process_main.hpp"

namespace trainer {

// How the program's ranks run when it is started alone, as --help describes it, and the
// launchers --backend chooses from then (the first is the default).
inline constexpr const char* alone_about = "on the GPU";
inline constexpr const char* alone_backends[] = {"simulated", "nccl"};

// The program on a machine without a CUDA device (see the top); `reason` says why there is none.
template <class Family>
int cuda_main_without_device(int argc, char** argv, const char* program,
                             const std::string& reason) {
  const parsed_command_line<Family> parsed = parse_command_line<Family>(
      argc, argv, program, alone_about, {alone_backends[0], alone_backends[1]}, true);
  if (const std::optional<int> answered = answer_without_training(parsed, program)) return *answered;
  std::fprintf(stderr, "%s: no CUDA device (%s); --dry-run sizes this run without one\n", program,
               reason.c_str());
  return 77;
}

template <class Family>
int cuda_main(int argc, char** argv, const char* program) {
  const tpx::cuda::device_census devices = tpx::cuda::find_devices();
  if (devices.count == 0) return cuda_main_without_device<Family>(argc, argv, program, devices.reason);
  const tpx::process_launcher started = tpx::process_launcher_from();
  const std::optional<std::string> backend_name = backend_flag(argc, argv);
  const auto refused = [&](const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  };
#ifdef TPX_EXAMPLES_MPI
  constexpr bool built_with_mpi = true;
#else
  constexpr bool built_with_mpi = false;
#endif
  try {
    switch (started.kind) {
      case tpx::process_launcher::alone:
        return train_main<Family>(argc, argv, program, alone_about,
                                  backend{alone_backends[0], tpx::cuda_simulated},
                                  backend{alone_backends[1], tpx::cuda_devices});
      case tpx::process_launcher::torchrun:
      case tpx::process_launcher::srun: {
        const tpx::launch_environment env = tpx::launch_environment_from();
        check_cuda_launch(started, env.world_size, backend_name, built_with_mpi);
        if (!only_rank_0_prints(env.rank)) return 1;
        return train_main<Family>(
            argc, argv, program, "one process per GPU, started by " + env.launcher,
            backend{"nccl", tpx::cuda_launched}, backend{"simulated", tpx::cuda_simulated});
      }
      case tpx::process_launcher::mpi:
        check_cuda_launch(started, 0, backend_name, built_with_mpi);  // a build without MPI
#ifdef TPX_EXAMPLES_MPI
        return as_mpi_process(argc, argv, [&](int processes) {
          try {
            check_cuda_launch(started, processes, backend_name, built_with_mpi);
          } catch (const std::invalid_argument& e) {
            return refused(e);
          }
          return train_main<Family>(argc, argv, program, "one MPI process per GPU",
                                    backend{"nccl", tpx::cuda_mpi},
                                    backend{"simulated", tpx::cuda_simulated});
        });
#endif
    }
  } catch (const std::invalid_argument& e) {
    return refused(e);
  }
  return 2;  // not reached: every launcher is handled above
}

}  // namespace trainer

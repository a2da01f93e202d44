// The main of the CUDA example trainers, tpx-train-cuda (the MLP) and tpx-gpt-cuda (the GPT
// example): their tensors in device memory and their whole step on the GPU, with the flags,
// progress lines and log of the host programs (cli.hpp). Two ways to run the ranks (--backend):
//   simulated  (default) every rank of the mesh a thread with its own stream on ONE GPU
//              (spmd(tpx::cuda_simulated, ...)), collectives as device-to-device copies and
//              reduction kernels: any mesh on one GPU
//   nccl       one GPU per rank, collectives over NCCL (spmd(tpx::cuda_devices, ...)): needs as
//              many GPUs as ranks; --mesh 1x1 runs every NCCL call on a single GPU
// Without a CUDA device it says so and exits with 77, the project's "skipped" status.
#pragma once

#include <cstdio>
#include <tpx/cuda/cuda.hpp>

#include "cli.hpp"

namespace trainer {

template <class Family>
int cuda_main(int argc, char** argv, const char* program) {
  const tpx::cuda::device_census devices = tpx::cuda::find_devices();
  if (devices.count == 0) {
    std::fprintf(stderr, "%s: no CUDA device (%s)\n", program, devices.reason.c_str());
    return 77;
  }
  return train_main<Family>(argc, argv, program, "on the GPU",
                            backend{"simulated", tpx::cuda_simulated},
                            backend{"nccl", tpx::cuda_devices});
}

}  // namespace trainer

// tpx-train-cuda: the example FSDP + TP trainer with the CUDA backend, its tensors in device
// memory and its whole step on the GPU. Two ways to run the ranks (--backend):
//   simulated  (default) every rank of the mesh a thread with its own stream on ONE GPU
//              (spmd(tpx::cuda_simulated, ...)), collectives as device-to-device copies and
//              reduction kernels: any mesh on one GPU
//   nccl       one GPU per rank, collectives over NCCL (spmd(tpx::cuda_devices, ...)): needs as
//              many GPUs as ranks; --mesh 1x1 runs every NCCL call on a single GPU
// The flags, progress lines and log are tpx-train's (cli.hpp); see README.md, "Running on a GPU".
//
//   tpx-train-cuda --mesh 2x2 --steps 300 --log train.jsonl
//   tpx-train-cuda --backend nccl --mesh 1x1 --steps 100
//
// Without a CUDA device it says so and exits with 77, the project's "skipped" status.
#include <cstdio>
#include <tpx/cuda/cuda.hpp>

#include "cli.hpp"

int main(int argc, char** argv) {
  const tpx::cuda::device_census devices = tpx::cuda::find_devices();
  if (devices.count == 0) {
    std::fprintf(stderr, "tpx-train-cuda: no CUDA device (%s)\n", devices.reason.c_str());
    return 77;
  }
  return trainer::train_main<trainer::mlp>(argc, argv, "tpx-train-cuda", "on the GPU",
                             trainer::backend{"simulated", tpx::cuda_simulated},
                             trainer::backend{"nccl", tpx::cuda_devices});
}

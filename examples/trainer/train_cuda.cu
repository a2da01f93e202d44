// tpx-train-cuda: the example FSDP + TP trainer with the CUDA backend: every rank of the mesh
// is a thread with its own stream on ONE GPU (spmd(tpx::cuda_simulated, ...)), its tensors in
// device memory, its collectives device-to-device copies and reduction kernels. The flags,
// progress lines and log are tpx-train's (cli.hpp); see README.md, "Running on a GPU".
//
//   tpx-train-cuda --mesh 2x2 --steps 300 --log train.jsonl
//
// GEMMs (cuBLASLt), collectives, elementwise ops, AdamW and the gradient norm run on the GPU;
// the embedding lookup, the loss rows and RMSNorm's row loops are staged through host memory
// (tensor/staging.hpp). Without a CUDA device it says so and exits with 77, the project's
// "skipped" status.
#include <cstdio>
#include <tpx/cuda/cuda.hpp>

#include "cli.hpp"

int main(int argc, char** argv) {
  const tpx::cuda::device_census devices = tpx::cuda::find_devices();
  if (devices.count == 0) {
    std::fprintf(stderr, "tpx-train-cuda: no CUDA device (%s)\n", devices.reason.c_str());
    return 77;
  }
  return trainer::train_main(argc, argv, "tpx-train-cuda",
                             "every rank a stream on one GPU (the simulated mesh)",
                             tpx::cuda_simulated);
}

// tpx-train-cuda: the example FSDP + TP trainer with the CUDA backend, its tensors in device
// memory and its whole step on the GPU (cuda_main.hpp: --backend simulated or nccl). The flags,
// progress lines and log are tpx-train's (cli.hpp), --pipeline P included (the model cut into P
// pipeline stages, pipelined_family.hpp); see README.md, "Running on a GPU".
//
//   tpx-train-cuda --mesh 2x2 --steps 300 --log train.jsonl
//   tpx-train-cuda --backend nccl --mesh 1x1 --steps 100
//   tpx-train-cuda --pipeline 2 --microbatches 8 --schedule zero-bubble-v --mesh 1x2
#include "cuda_main.hpp"
#include "mlp_or_pipelined.hpp"
// After cuda_main.hpp, whose launchers training.hpp's qualified tpx::spmd calls must see:
#include "device_ranks.hpp"  // the loop of a rank, compiled in device_ranks*.cu

int main(int argc, char** argv) {
  return trainer::with_mlp_or_pipelined(argc, argv, "tpx-train-cuda", [&]<class Family>() {
    return trainer::cuda_main<Family>(argc, argv, "tpx-train-cuda");
  });
}

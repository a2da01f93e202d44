// tpx-gpt-cuda: the GPT example (README.md beside it) on the CUDA backend, its tensors in device
// memory and its whole step on the GPU (examples/trainer/cuda_main.hpp: --backend simulated or
// nccl), with tpx-gpt's flags, progress lines and log.
//
//   tpx-gpt-cuda --mesh 2x2 --steps 300 --log gpt.jsonl
//   tpx-gpt-cuda --backend nccl --mesh 1x1 --steps 100 --bf16
#include "../trainer/cuda_main.hpp"
// After cuda_main.hpp, whose launchers training.hpp's qualified tpx::spmd calls must see:
#include "device_ranks.hpp"  // the loop of a rank, compiled in device_ranks.cu

int main(int argc, char** argv) { return trainer::cuda_main<gpt::family>(argc, argv, "tpx-gpt-cuda"); }

// The options of tpx's CUDA launchers (spmd(tpx::cuda_simulated, ...), spmd(tpx::cuda_devices,
// ...) and cuda::run_rank): how long a rank may wait for its group, what each rank's GPU
// resources look like, and, for the simulated mesh, which GPU its ranks share.
#pragma once

#include <chrono>

#include "tpx/cuda/rank_resources.hpp"

namespace tpx::cuda {

struct launch_options {
  // A rank that waits longer than this for its group (simulated mesh), or a collective that has
  // not completed after it (NCCL), fails the run with comm_error naming the collective.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  rank_options rank{};
  // The GPU every rank of a simulated mesh runs on.
  int device = 0;
};

}  // namespace tpx::cuda

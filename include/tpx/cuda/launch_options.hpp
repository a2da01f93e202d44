// The options of tpx's CUDA launchers (spmd(tpx::cuda_simulated, ...), spmd(tpx::cuda_devices,
// ...) and cuda::run_rank): how long a rank may wait for its group, whether NCCL first checks
// that every rank calls the same collective, what each rank's GPU resources look like, and, for
// the simulated mesh, which GPU its ranks share.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string_view>

#include "tpx/cuda/rank_resources.hpp"

namespace tpx::cuda {

struct launch_options {
  // A rank that waits longer than this for its group (simulated mesh), or a collective that has
  // not completed after it (NCCL), fails the run with comm_error naming the collective.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // NCCL: before each collective, exchange a record of the call with the group and fail every
  // rank, naming the one that differs, when the calls disagree (nccl_communicator.hpp). Costs a
  // small all-gather and a host wait per collective, so off unless asked for, here or by
  // TPX_CHECK_COLLECTIVES=1 (collectives_checked_by_environment). The simulated mesh always
  // checks.
  bool check_collectives = false;
  rank_options rank{};
  // The GPU every rank of a simulated mesh runs on.
  int device = 0;
};

// Whether the environment asks for checked collectives (TPX_CHECK_COLLECTIVES=1, as PyTorch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL), so that a hanging run can be diagnosed without rebuilding it.
// Every rank must see the same value: a checking rank's exchanges would meet an unchecked
// peer's data collectives.
inline bool collectives_checked_by_environment() {
  const char* value = std::getenv("TPX_CHECK_COLLECTIVES");
  return value != nullptr && std::string_view(value) == "1";
}

// Whether a rank launched with `options` checks its collectives, asked for either way. Part of
// the launch fingerprint (nccl_launch.hpp), so that ranks that disagree are refused at start.
inline bool collectives_checked(const launch_options& options) {
  return options.check_collectives || collectives_checked_by_environment();
}

}  // namespace tpx::cuda

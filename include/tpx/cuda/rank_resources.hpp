// rank_resources: what one rank of a CUDA mesh owns on its GPU: the device, a stream, the
// device's memory pool, the cuBLASLt handle, workspace and plan cache of its GEMMs, and the
// pinned buffer its uploads pass through (host_staging.hpp).
//
// A CUDA launcher makes one per rank, on the rank's thread, and hands it to the rank's
// rank_context (rank_context::set_backend); the device space (device_space.hpp) finds it with
// resources_of(ctx) whenever a tensor of that rank allocates, copies, multiplies or runs a
// kernel. Every such operation is queued on the rank's one stream, so a rank's work is ordered
// as its program is written, while different ranks (threads sharing a GPU in the simulated mesh)
// run concurrently. Allocation goes through the device's default memory pool with its release
// threshold raised to "never", so memory freed in one training step is reused by the next
// without returning to the driver (no cudaMalloc per step); the pool is per device, and shared
// by every rank (and library) using the device in this process.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/gemm_plan.hpp"
#include "tpx/cuda/host_staging.hpp"
#include "tpx/cuda/stream.hpp"
#include "tpx/spmd/rank_context.hpp"

namespace tpx::cuda {

struct rank_options {
  // Multiply fp32 tensors on TF32 tensor cores (as torch.backends.cuda.matmul.allow_tf32).
  bool tf32 = false;
  // The cuBLASLt workspace of each rank (32 MiB is NVIDIA's advice for Hopper).
  std::size_t gemm_workspace_bytes = std::size_t{32} << 20;
};

class rank_resources final : public backend_state {
 public:
  // Makes `device` current on the calling thread and sets up the rank there.
  rank_resources(int device, const rank_options& options)
      : device_(select(device)),
        pool_(default_pool(device)),
        gemm_(options.gemm_workspace_bytes, pool_, stream_.get()),
        options_(options) {}
  rank_resources(const rank_resources&) = delete;
  rank_resources& operator=(const rank_resources&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_.get(); }
  cudaMemPool_t pool() const { return pool_; }
  gemm_plans& gemms() { return gemm_; }
  const rank_options& options() const { return options_; }
  host_staging& staging() { return staging_; }

  // Waits for everything queued on the rank's stream; reports a fault of any of it.
  void synchronize() const { stream_.synchronize(); }

 private:
  static int select(int device) {
    TPX_CUDA_CHECK(cudaSetDevice(device));
    return device;
  }
  static cudaMemPool_t default_pool(int device) {
    cudaMemPool_t pool = nullptr;
    TPX_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    std::uint64_t keep_everything = std::numeric_limits<std::uint64_t>::max();
    TPX_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
    return pool;
  }

  int device_;
  cudaMemPool_t pool_;
  cuda::stream stream_;
  gemm_plans gemm_;
  rank_options options_;
  host_staging staging_;  // last: its destructor waits for the stream's last upload
};

// The CUDA resources of the rank a tensor belongs to.
inline rank_resources& resources_of(const rank_context& ctx) {
  auto* resources = dynamic_cast<rank_resources*>(ctx.backend());
  if (resources == nullptr)
    throw std::logic_error("tpx: rank " + std::to_string(ctx.world_rank()) +
                           " has no CUDA resources: device tensors need a rank started by a CUDA launcher "
                           "(spmd(tpx::cuda_simulated, ...), spmd(tpx::cuda_devices, ...) or cuda::run_rank)");
  return *resources;
}

}  // namespace tpx::cuda

// DeviceRank<Mesh<X, Y>>: the handle a CUDA launcher passes to the SPMD function: a Rank (its
// place on the mesh and its communicators) whose tensors live on its GPU.
//
// `using space = cuda::device_space` is what makes tpx's factories return DeviceTensors for it
// (tensor/factories.hpp), so `[](auto& rank) { auto x = tpx::randn<float, B<X>>(rank, ...); }`
// makes host tensors under spmd(tpx::host, ...) and device tensors under a CUDA launcher. The
// rank's CUDA resources (device, stream, pool, cuBLASLt) are set as its backend state.
#pragma once

#include <cuda_runtime.h>

#include <utility>
#include <vector>

#include "tpx/cuda/device_space.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/spmd/rank.hpp"

namespace tpx::cuda {

template <class MeshT>
class DeviceRank : public Rank<MeshT> {
 public:
  using space = device_space;

  DeviceRank(const MeshT& mesh, int world_rank, std::vector<axis_place> axes, std::vector<any_communicator*> groups,
             rank_resources& resources)
      : Rank<MeshT>(mesh, world_rank, std::move(axes), std::move(groups)), resources_(&resources) {
    this->set_backend(resources_);
  }
  DeviceRank(const DeviceRank&) = delete;  // tensors keep a pointer to their rank
  DeviceRank& operator=(const DeviceRank&) = delete;

  rank_resources& resources() const { return *resources_; }
  int device() const { return resources_->device(); }
  // The stream the rank's work goes to now (its background lane's inside a background task).
  cudaStream_t stream() const { return resources_->stream(); }
  // Waits for all work this rank has queued, on either stream.
  void synchronize() const { resources_->synchronize(); }

 private:
  rank_resources* resources_;
};

}  // namespace tpx::cuda

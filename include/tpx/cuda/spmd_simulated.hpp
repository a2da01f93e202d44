// spmd(tpx::cuda_simulated, mesh, fn): every rank of the mesh as a thread of this process, all
// on ONE GPU, each with its own stream, collectives as device-to-device copies and reduction
// kernels (SimulatedCommunicator). It is how a user with a single GPU runs, and tests, a
// program written for many: the analogue of JAX's forced host devices, on the device.
//
// The launcher runs on top of the host one (spmd(tpx::host, ...), spmd/spmd.hpp), which gives
// the threads, and reports a failing rank as "tpx: rank 2 (X=1, Y=0) failed: ..." with the
// original exception nested. On each rank's thread it makes the rank's CUDA resources
// (rank_resources: device, stream, pool, cuBLASLt) and one SimulatedCommunicator per set of mesh
// axes, registered in a HostWorld of its own; a failure, and a rank's return, are reported to
// that world too, so the other ranks' collectives fail at once instead of waiting for the
// timeout, as on the host (a collective that a returned rank never joined is named, and ranks
// that all wait in collectives that can never complete fail with who waits where). fn receives a
// DeviceRank, so tensors made for it live on the GPU; when fn returns, the launcher waits for
// the rank's stream, so device faults are reported as that rank's failure. The resources and
// communicators are destroyed when every rank has returned, since peers read each other's events.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "tpx/comm/any_communicator.hpp"
#include "tpx/comm/host_world.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device.hpp"
#include "tpx/cuda/device_rank.hpp"
#include "tpx/cuda/launch_options.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/cuda/simulated_communicator.hpp"
#include "tpx/launch/process_group.hpp"
#include "tpx/sharding/mesh.hpp"
#include "tpx/spmd/spmd.hpp"

namespace tpx {

// Selects the simulated CUDA mesh: all ranks on one GPU (launch_options::device).
struct cuda_simulated_backend {
  using options = cuda::launch_options;
};
inline constexpr cuda_simulated_backend cuda_simulated{};
// Its ranks are threads of this process (launch/process_group.hpp).
inline this_process_only processes_of(const cuda_simulated_backend&) { return {}; }

template <MeshAxis... Axes, class Fn>
void spmd(cuda_simulated_backend, const Mesh<Axes...>& mesh, Fn&& fn, cuda::launch_options options = {}) {
  using MeshT = Mesh<Axes...>;
  constexpr unsigned masks = 1u << MeshT::axis_count;
  const cuda::device_census devices = cuda::find_devices();
  if (options.device < 0 || options.device >= devices.count)
    throw cuda::cuda_error("tpx: spmd(tpx::cuda_simulated): no CUDA device " + std::to_string(options.device) + " (" +
                           std::to_string(devices.count) + " found" +
                           (devices.reason.empty() ? "" : ": " + devices.reason) + ")");
  HostWorld world(mesh.rank_count(), HostWorldOptions{options.timeout});
  std::vector<int> set_of_mask(masks, HostWorld::whole_world);
  for (unsigned mask = 1; mask < masks; ++mask)
    set_of_mask[mask] = world.add_groups(detail::groups_of_axes(mesh, mask), detail::axes_label<MeshT>(mask));

  // Each rank's CUDA state outlives every rank's thread: a peer still finishing its last
  // collective reads the events this rank published for it (step 3 of simulated_communicator.hpp)
  // after this rank may have returned, so a rank's resources and communicators are destroyed only
  // once all threads have joined (seen on an H200: "context is destroyed" from a peer's
  // cudaStreamWaitEvent on a returned rank's event). Members go in reverse: communicators first.
  struct rank_state {
    std::optional<cuda::rank_resources> resources;
    std::vector<std::unique_ptr<communicator_model<cuda::SimulatedCommunicator>>> comms;
  };
  std::vector<rank_state> states(static_cast<std::size_t>(mesh.rank_count()));

  spmd(
      host, mesh,
      [&](auto& host_rank) {
        const int r = host_rank.world_rank();
        try {
          rank_state& state = states[static_cast<std::size_t>(r)];
          cuda::rank_resources& resources = state.resources.emplace(options.device, options.rank);
          auto& comms = state.comms;
          std::vector<any_communicator*> groups(masks, nullptr);
          for (unsigned mask = 1; mask < masks; ++mask) {
            comms.push_back(std::make_unique<communicator_model<cuda::SimulatedCommunicator>>(
                cuda::SimulatedCommunicator(world, set_of_mask[mask], r, resources)));
            groups[mask] = comms.back().get();
          }
          cuda::DeviceRank<MeshT> rank(mesh, r, host_rank.axes(), std::move(groups), resources);
          fn(rank);
          resources.synchronize();
          world.finish(r);
        } catch (const std::exception& e) {
          world.abort(r, e.what());
          throw;
        } catch (...) {
          world.abort(r, "unknown exception");
          throw;
        }
      },
      spmd_options{options.timeout});
}

}  // namespace tpx

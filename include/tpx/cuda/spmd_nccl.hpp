// Running a mesh over NCCL, one GPU per rank:
//
//   cuda::run_rank(mesh, {id, world_rank, device}, fn)   this process's one rank of the mesh
//   spmd(tpx::cuda_devices, mesh, fn)                    every rank, a thread per GPU of this
//                                                        process (rank r on device r)
//
// run_rank is the building block of the one-process-per-GPU deployment that multi-node
// training uses: every process calls it with the same mesh and the same ncclUniqueId (made by
// rank 0 with nccl_unique_id() and handed out by whatever starts the processes: under torchrun
// or srun, nccl_launch.hpp's run_launched_rank does it), and its own rank and GPU. It makes the
// rank's CUDA resources and its NCCL communicators (nccl_mesh.hpp), calls fn with a DeviceRank,
// then waits for the rank's collectives and stream, so that errors surface as this rank's. With
// checked collectives (launch_options::check_collectives or TPX_CHECK_COLLECTIVES=1:
// nccl_communicator.hpp), a rank whose fn has returned first tells each of its groups, so that a
// peer still waiting in a collective the rank never joins fails at once, naming it, instead of at
// the timeout; ranks waiting in each other's collectives are seen only by a watcher of the whole
// job, which spmd(tpx::cuda_mpi, ...), spmd(tpx::cuda_launched, ...) and
// spmd(tpx::cuda_devices, ...) give.
//
// spmd(tpx::cuda_devices, ...) runs all ranks in one process, one thread per GPU, on top of the
// host launcher (which reports "tpx: rank 2 (X=1, Y=0) failed: ..."); when a rank fails, the
// others' NCCL calls abort at their next poll instead of waiting out the timeout. With
// collectives checked, its ranks report their exchanges to an InProcessWatchdog
// (comm/in_process_watchdog.hpp), so ranks waiting in each other's collectives all fail within a
// fraction of a second with the picture of who waits where. It is what the CUDA tests use on a
// machine with several GPUs.
#pragma once

#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "tpx/comm/host_failure.hpp"
#include "tpx/comm/in_process_watchdog.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device.hpp"
#include "tpx/cuda/device_rank.hpp"
#include "tpx/cuda/launch_options.hpp"
#include "tpx/cuda/nccl_communicator.hpp"
#include "tpx/cuda/nccl_mesh.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/launch/process_group.hpp"
#include "tpx/launch/this_host.hpp"
#include "tpx/sharding/mesh.hpp"
#include "tpx/spmd/spmd.hpp"

namespace tpx {

namespace cuda {

namespace detail {
// run_rank, with another rank of this process's failure to abort on, and a watcher of the checked
// exchanges (comm/exchange_watcher.hpp), or none of either.
template <MeshAxis... Axes, class Fn>
void run_rank_watched(const Mesh<Axes...>& mesh, const nccl_bootstrap& boot, Fn&& fn,
                      const launch_options& options, const tpx::detail::HostFailure* failure,
                      tpx::detail::exchange_watcher* watcher = nullptr) {
  using MeshT = Mesh<Axes...>;
  rank_resources resources(boot.device, options.rank);
  const bool check_collectives = collectives_checked(options);
  nccl_mesh<MeshT> comms(mesh, boot, resources,
                         nccl_watch{options.timeout, failure, check_collectives, watcher});
  std::vector<axis_place> axes;
  int a = 0;
  ((axes.push_back({&axis_key<Axes>, Axes::name.c_str(), mesh.size(a), mesh.coord(boot.world_rank, a)}), ++a), ...);
  DeviceRank<MeshT> rank(mesh, boot.world_rank, std::move(axes), comms.groups(), resources);
  fn(rank);
  comms.return_from_groups(watcher);
  for (unsigned mask = 1; mask < nccl_mesh<MeshT>::masks; ++mask) comms.nccl(mask).wait_all();
  resources.synchronize();
}
}  // namespace detail

// Runs this process's rank `boot.world_rank` of the mesh on GPU `boot.device` (see the top).
template <MeshAxis... Axes, class Fn>
void run_rank(const Mesh<Axes...>& mesh, const nccl_bootstrap& boot, Fn&& fn, const launch_options& options = {}) {
  detail::run_rank_watched(mesh, boot, fn, options, nullptr);
}

}  // namespace cuda

// Selects one GPU per rank, all in this process: rank r on device r, NCCL between them.
struct cuda_devices_backend {
  using options = cuda::launch_options;
};
inline constexpr cuda_devices_backend cuda_devices{};
// Its ranks are threads of this process (launch/process_group.hpp).
inline this_process_only processes_of(const cuda_devices_backend&) { return {}; }

template <MeshAxis... Axes, class Fn>
void spmd(cuda_devices_backend, const Mesh<Axes...>& mesh, Fn&& fn, cuda::launch_options options = {}) {
  const cuda::device_census devices = cuda::find_devices();
  if (devices.count < mesh.rank_count())
    throw cuda::cuda_error("tpx: spmd(tpx::cuda_devices): the mesh " + mesh.to_string() + " has " +
                           std::to_string(mesh.rank_count()) + " ranks but this process sees " +
                           std::to_string(devices.count) + " CUDA device(s)" +
                           (devices.reason.empty() ? "" : " (" + devices.reason + ")"));
  const ncclUniqueId id = cuda::nccl_unique_id();
  detail::HostFailure failure;
  std::optional<detail::InProcessWatchdog> watchdog;
  if (cuda::collectives_checked(options))
    watchdog.emplace(
        mesh.rank_count(), options.timeout, detail::mesh_group_layout(mesh),
        std::vector<std::string>(static_cast<std::size_t>(mesh.rank_count()), this_host()));
  spmd(
      host, mesh,
      [&](auto& host_rank) {
        const int r = host_rank.world_rank();
        try {
          cuda::detail::run_rank_watched(mesh, cuda::nccl_bootstrap{id, r, r}, fn, options,
                                         &failure, watchdog ? &watchdog->of(r) : nullptr);
        } catch (const std::exception& e) {
          failure.record(r, e.what());
          throw;
        } catch (...) {
          failure.record(r, "unknown exception");
          throw;
        }
      },
      spmd_options{options.timeout});
}

}  // namespace tpx

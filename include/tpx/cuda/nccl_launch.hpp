// One process per GPU, started by torchrun or srun without MPI: this process's place comes from
// the launcher's variables (launch/launch_environment.hpp), NCCL's unique id from rank 0 over
// the TCP rendezvous (launch/tcp_rendezvous.hpp), and its GPU is its rank on the node, or the one
// GPU the launcher gave it (srun --gpus-per-task=1: launch/local_device.hpp).
//
//   cuda::nccl_bootstrap_from(env, fingerprint, timeout)   the id, world rank and device (and,
//                                                          if asked, the rendezvous's links)
//   cuda::run_launched_rank(mesh, fn, options)              that, then cuda::run_rank
//   spmd(tpx::cuda_launched, mesh, fn, options)             the same as an SPMD launcher
//
// Before any NCCL call every rank checks what would otherwise hang or fail deep inside NCCL: a
// launch whose world size is not the mesh's rank count, a node with more ranks than GPUs,
// (through the rendezvous fingerprint) ranks built from other tpx, CUDA or NCCL versions or
// given another mesh, and (through the ranks' claims, launch/exclusive_claims.hpp) two ranks
// driving one GPU. Each fails with a message naming the rank and its host.
//
// spmd(tpx::cuda_launched, ...) lets code written against a launcher (the example trainers)
// run as one launched process: it is run_launched_rank, with a failure of fn reported as
// spmd_error "tpx: rank 2 (X=1, Y=0) on host node3 failed: ...". The other processes learn of it
// when their NCCL calls time out (launch_options::timeout), unless the launcher ends them first
// (torchrun does; srun with --kill-on-bad-exit=1). With collectives checked, the rendezvous's
// connections stay open as the heartbeat of a TcpWatchdog (comm/tcp_watchdog.hpp), so ranks
// waiting in each other's collectives (a cycle across groups) fail about a second after the
// cycle forms, with world rank 0's picture of who waits where. Decisions one process takes for
// all before the ranks start, such as a checkpoint folder's lock, travel over the same port:
// processes_of(tpx::cuda_launched) is the launch's tcp_processes (launch/process_group.hpp,
// launch/tcp_processes.hpp), each broadcast a rendezvous of its own before NCCL's.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tpx/comm/tcp_watchdog.hpp"
#include "tpx/cuda/device.hpp"
#include "tpx/cuda/launch_options.hpp"
#include "tpx/cuda/nccl_mesh.hpp"
#include "tpx/cuda/spmd_nccl.hpp"
#include "tpx/launch/build_fingerprint.hpp"
#include "tpx/launch/launch_environment.hpp"
#include "tpx/launch/local_device.hpp"
#include "tpx/launch/tcp_processes.hpp"
#include "tpx/launch/tcp_rendezvous.hpp"
#include "tpx/sharding/mesh.hpp"
#include "tpx/spmd/spmd.hpp"

namespace tpx::cuda {

// What every rank of one launch must agree on: the fields every launcher compares
// (launch/build_fingerprint.hpp: the mesh, the compiler, build options, type sizes), the CUDA
// and NCCL versions it was built with, and whether its collectives are checked (a checking
// rank's record exchange would meet an unchecked peer's collective), as one line for the
// rendezvous.
inline std::string launch_fingerprint(const std::string& mesh, const launch_options& options) {
  std::vector<fingerprint_field> fields = build_fingerprint(mesh);
  fields.push_back(
      {"collectives checked (TPX_CHECK_COLLECTIVES)", collectives_checked(options) ? "yes" : "no"});
  fields.push_back({"CUDA runtime", std::to_string(CUDART_VERSION)});
  fields.push_back({"NCCL", std::to_string(NCCL_VERSION_CODE)});
  fields.push_back({"ncclUniqueId bytes", std::to_string(sizeof(ncclUniqueId))});
  return fingerprint_text(fields);
}

// This process's nccl_bootstrap: rank 0 makes the id and the rendezvous hands it to the others;
// the device is the local rank's among those it sees (launch/local_device.hpp). The
// rendezvous's connections go to `links` if given (for the heartbeat: comm/tcp_watchdog.hpp),
// else they close.
inline nccl_bootstrap nccl_bootstrap_from(const launch_environment& env,
                                          std::string_view fingerprint,
                                          std::chrono::milliseconds timeout,
                                          rendezvous_links* links = nullptr) {
  const device_census devices = find_devices();
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const int device = local_device(env.local_rank, devices.count, visible);
  if (device < 0) {
    throw cuda_error("tpx: rank " + std::to_string(env.rank) + " of " +
                     std::to_string(env.world_size) + " is local rank " +
                     std::to_string(env.local_rank) + " on " + tpx::this_host() + " " +
                     local_device_shortage(devices.count, visible, devices.reason));
  }
  ncclUniqueId id{};
  if (env.rank == 0) id = nccl_unique_id();
  rendezvous_links met = tcp_rendezvous_linked(env, std::as_bytes(std::span(&id, 1)), fingerprint,
                                               timeout, gpu_claim(device, visible, env.local_rank));
  const std::vector<std::byte> bytes = std::move(met.payload);
  if (bytes.size() != sizeof id) {
    throw rendezvous_error("tpx: rank " + std::to_string(env.rank) + " received " +
                           std::to_string(bytes.size()) + " bytes for NCCL's id, not " +
                           std::to_string(sizeof id));
  }
  std::memcpy(&id, bytes.data(), sizeof id);
  if (links != nullptr) *links = std::move(met);
  return {id, env.rank, device};
}

// Runs this process's rank of `mesh` under the launch its environment describes (see the top).
// options.timeout bounds the rendezvous as it bounds every collective.
template <MeshAxis... Axes, class Fn>
void run_launched_rank(const Mesh<Axes...>& mesh, Fn&& fn, const launch_options& options = {}) {
  const launch_environment env = launch_environment_from();
  if (env.world_size != mesh.rank_count()) {
    throw std::invalid_argument("tpx: rank " + std::to_string(env.rank) + " on " +
                                tpx::this_host() + ": the " + env.launcher + " launch has " +
                                std::to_string(env.world_size) + " processes but the mesh " +
                                mesh.to_string() + " has " + std::to_string(mesh.rank_count()) +
                                " ranks");
  }
  const bool checked = collectives_checked(options);
  rendezvous_links links;
  const nccl_bootstrap boot =
      nccl_bootstrap_from(env, launch_fingerprint(mesh.to_string(), options), options.timeout,
                          checked ? &links : nullptr);
  // Every process or none: whether collectives are checked is in the fingerprint above.
  std::optional<tpx::detail::TcpWatchdog> watchdog;
  if (checked)
    watchdog.emplace(env.rank, env.world_size, options.timeout,
                     tpx::detail::mesh_group_layout(mesh), std::move(links));
  detail::run_rank_watched(mesh, boot, fn, options, nullptr, watchdog ? &*watchdog : nullptr);
}

}  // namespace tpx::cuda

namespace tpx {

// Selects this process's one rank of a launch started by torchrun or srun (see the top).
struct cuda_launched_backend {
  using options = cuda::launch_options;
};
inline constexpr cuda_launched_backend cuda_launched{};

// The processes of this launch, for decisions before the ranks start (see the top).
inline tcp_processes processes_of(const cuda_launched_backend&) {
  return tcp_processes(launch_environment_from());
}

template <MeshAxis... Axes, class Fn>
void spmd(cuda_launched_backend, const Mesh<Axes...>& mesh, Fn&& fn,
          cuda::launch_options options = {}) {
  cuda::run_launched_rank(
      mesh,
      [&](auto& rank) {
        try {
          fn(rank);
        } catch (const std::exception& e) {
          std::throw_with_nested(spmd_error(
              rank.world_rank(), "tpx: " + detail::rank_label(mesh, rank.world_rank()) +
                                     " on host " + tpx::this_host() + " failed: " + e.what()));
        }
      },
      options);
}

}  // namespace tpx

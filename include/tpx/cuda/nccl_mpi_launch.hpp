// spmd(tpx::cuda_mpi, mesh, fn): this process's one rank of the mesh on a GPU of its own, for
// programs started by mpirun (or srun --mpi=...), with collectives over NCCL. What
// nccl_launch.hpp does for torchrun and srun through a TCP rendezvous, done through MPI where MPI
// is there (issue 10): the process's rank is its MPI_COMM_WORLD rank, its GPU its rank among the
// processes of its node (MPI_COMM_TYPE_SHARED), or the one GPU the launcher gave it
// (launch/local_device.hpp), and NCCL's unique id comes from world rank 0 by
// MPI_Bcast. The collectives are NCCL's (cuda/spmd_nccl.hpp's run_rank); with collectives
// checked (TPX_CHECK_COLLECTIVES=1), MPI also carries the heartbeat of the MPI backend
// (comm/mpi_watchdog.hpp): every checked exchange and every wait in one is reported to it, so
// that ranks waiting in each other's collectives (a cycle across groups) fail within about a
// second with the picture of who waits where, from world rank 0, instead of at the timeout.
//
// Before any NCCL call every process checks what would otherwise hang inside NCCL: a job whose
// size is not the mesh's rank count (every process throws spmd_error naming both, as
// spmd(tpx::mpi) does), a node with more processes than GPUs, processes built from other tpx,
// CUDA or NCCL versions or given another mesh (world rank 0's fingerprint, sent to all), and two
// processes driving one GPU (their claims gathered on every process:
// launch/exclusive_claims.hpp). A failure that may differ between processes, those and any
// failure of fn, ends the job as spmd(tpx::mpi) does: the rank prints "tpx: rank 2 (X=1, Y=0)
// on host node3 failed: ..." and calls MPI_Abort, so that no process waits in NCCL for one that
// is gone.
//
// Its process group is MPI_COMM_WORLD's (processes_of: launch/mpi_processes.hpp), so code that
// lets one process decide for all before the ranks start (the example trainers' checkpoint folder)
// works under it as under spmd(tpx::mpi, ...). Needs MPI: link tpx::mpi beside tpx::cuda.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include "tpx/comm/mpi_errors.hpp"
#include "tpx/cuda/device.hpp"
#include "tpx/cuda/launch_options.hpp"
#include "tpx/cuda/nccl_launch.hpp"
#include "tpx/cuda/nccl_mesh.hpp"
#include "tpx/cuda/spmd_nccl.hpp"
#include "tpx/launch/local_device.hpp"
#include "tpx/launch/mpi_processes.hpp"
#include "tpx/launch/started_by_mpi.hpp"
#include "tpx/sharding/mesh.hpp"
#include "tpx/spmd/spmd.hpp"
#include "tpx/spmd/spmd_mpi.hpp"

namespace tpx {

// Selects one process per rank and GPU under mpirun, NCCL between them (see the top).
struct cuda_mpi_backend {
  using options = cuda::launch_options;
};
inline constexpr cuda_mpi_backend cuda_mpi{};

inline mpi_world_processes processes_of(const cuda_mpi_backend&) { return {}; }

namespace cuda::detail {

// This process's rank among the processes of the job on its node.
inline int mpi_rank_on_node() {
  MPI_Comm node;
  tpx::detail::check_mpi(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
      "MPI_Comm_split_type", "finding this process's GPU (its rank on its node)");
  int rank = 0;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  return rank;
}

// This process's nccl_bootstrap: the id from world rank 0, the GPU from the rank on the node
// (local_device), after the checks at the top. Collective over MPI_COMM_WORLD.
inline nccl_bootstrap nccl_bootstrap_from_mpi(const mpi_world_processes& processes,
                                              const std::string& fingerprint) {
  const int on_node = mpi_rank_on_node();
  const device_census devices = find_devices();
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const int device = local_device(on_node, devices.count, visible);
  if (device < 0)
    throw cuda_error("it is process " + std::to_string(on_node) + " of the job on its node " +
                     local_device_shortage(devices.count, visible, devices.reason));
  const std::string first = processes.broadcast_from_first(fingerprint);
  if (first != fingerprint)
    throw std::invalid_argument("it was built or started for " + fingerprint +
                                ", world rank 0 for " + first +
                                ": start every process from one build, with one mesh");
  const std::string shared = shared_claim_among(processes, gpu_claim(device, visible, on_node));
  if (!shared.empty())
    throw std::invalid_argument("the processes of this job cannot share a GPU: " + shared);
  ncclUniqueId id{};
  if (processes.rank() == 0) id = nccl_unique_id();
  const std::string bytes =
      processes.broadcast_from_first(std::string(reinterpret_cast<const char*>(&id), sizeof id));
  std::memcpy(&id, bytes.data(), sizeof id);
  return {id, processes.rank(), device};
}

}  // namespace cuda::detail

template <MeshAxis... Axes, class Fn>
void spmd(cuda_mpi_backend, const Mesh<Axes...>& mesh, Fn&& fn, cuda::launch_options options = {}) {
  const mpi_world_processes processes;
  const int r = processes.rank();
  const std::string host = detail::mpi_host_name();
  if (processes.size() != mesh.rank_count())
    throw spmd_error(
        r, "tpx: the mesh (" + mesh.to_string() + ") has " + std::to_string(mesh.rank_count()) +
               " ranks but MPI started " + std::to_string(processes.size()) +
               " processes (seen by MPI rank " + std::to_string(r) + " on host " + host +
               "); start one process per rank and GPU: " + mpi_launch_command(mesh.rank_count()));
  const std::string failed = "tpx: " + detail::rank_label(mesh, r) + " on host " + host + " failed";
  // Outside the try, as spmd(tpx::mpi) keeps its own: a failing rank aborts the job while the
  // heartbeat's word in flight still has its buffer.
  std::unique_ptr<detail::MpiWatchdog> watchdog;
  try {
    const cuda::nccl_bootstrap boot = cuda::detail::nccl_bootstrap_from_mpi(
        processes, cuda::launch_fingerprint(mesh.to_string(), options));
    // Every process or none: whether collectives are checked is in the fingerprint above.
    if (cuda::collectives_checked(options))
      watchdog =
          std::make_unique<detail::MpiWatchdog>(detail::hosts_of_an_alike_job(mesh.to_string(), r),
                                                options.timeout, detail::mesh_group_layout(mesh));
    cuda::detail::run_rank_watched(mesh, boot, fn, options, nullptr, watchdog.get());
    if (watchdog) watchdog->finish();
  } catch (const std::exception& e) {
    detail::abort_mpi_job(failed + ": " + e.what());
  } catch (...) {
    detail::abort_mpi_job(failed + " with a non-standard exception");
  }
}

}  // namespace tpx

// The NCCL communicators of one rank of a mesh: a world communicator made from an ncclUniqueId,
// and from it, with ncclCommSplit, one communicator per set of mesh axes (the rows, the
// columns, ... : the ranks that agree on every other axis, ordered by world rank), exactly the
// groups the host and simulated launchers register. The set of all axes is the world itself.
//
// Every communicator is nonblocking (ncclConfig_t::blocking = 0), so creating one cannot hang:
// each creation is polled with ncclCommGetAsyncError until it is ready (a split: the parent first,
// which is what fills in the new communicator), and one that is not ready within the timeout (a
// rank that never joined) is aborted with an error naming it.
// All ranks must build their nccl_mesh with the same mesh and unique id, at the same time.
// Each communicator knows its members' world ranks and mesh axes, to name its group in messages
// ("group {0,2} (mesh axis X)", as the host and MPI backends do), and every world rank's host,
// all-gathered once over the world communicator as it is made, so that a message names the
// machine a failing rank runs on. When the rank's function has returned, return_from_groups()
// tells every group at once (with collectives checked), and the exchange watcher, if the launch
// has one (comm/exchange_watcher.hpp), while it waits for them.
#pragma once

#include <nccl.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tpx/comm/any_communicator.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/exchange_watcher.hpp"
#include "tpx/cuda/nccl_check.hpp"
#include "tpx/cuda/nccl_communicator.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/launch/this_host.hpp"
#include "tpx/sharding/mesh.hpp"
#include "tpx/spmd/spmd.hpp"

namespace tpx::cuda {

// What a rank needs to join the world: the id rank 0 made with nccl_unique_id() and passed to
// every rank (nccl_launch.hpp's TCP rendezvous under torchrun or srun; MPI, a file), its rank
// and the GPU it drives.
struct nccl_bootstrap {
  ncclUniqueId id;
  int world_rank = 0;
  int device = 0;
};

inline ncclUniqueId nccl_unique_id() {
  ncclUniqueId id;
  TPX_NCCL_CHECK(ncclGetUniqueId(&id));
  return id;
}

namespace detail {
// Polls a nonblocking communicator being created until it is ready; aborts it after `timeout`,
// unless `owned`: then its owner, which the throw unwinds, aborts it.
inline void await_ready(ncclComm_t comm, const char* what, const nccl_watch& watch, bool owned = false) {
  const auto deadline = std::chrono::steady_clock::now() + watch.timeout;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    TPX_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
    const bool late = std::chrono::steady_clock::now() > deadline;
    const bool peer_failed = watch.failure != nullptr && watch.failure->happened();
    if (state == ncclInProgress && (late || peer_failed)) {
      if (!owned) ncclCommAbort(comm);
      throw nccl_error(std::string("tpx: ") + what + ": " +
                       (peer_failed ? watch.failure->reason()
                                    : "not ready after " + std::to_string(watch.timeout.count()) +
                                          " ms (did every rank join?)"));
    }
    std::this_thread::yield();
  }
  if (state != ncclSuccess) {
    if (!owned) ncclCommAbort(comm);
    throw nccl_error(std::string("tpx: ") + what + " failed: " + ncclGetErrorString(state));
  }
}

inline ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}
}  // namespace detail

template <class MeshT>
class nccl_mesh {
 public:
  static constexpr unsigned masks = 1u << MeshT::axis_count;

  // Joins the world of mesh.rank_count() ranks and splits it; resources must be on boot.device.
  nccl_mesh(const MeshT& mesh, const nccl_bootstrap& boot, rank_resources& resources, const nccl_watch& watch) {
    ncclConfig_t config = detail::nonblocking_config();
    ncclComm_t world = nullptr;
    const ncclResult_t started = ncclCommInitRankConfig(&world, mesh.rank_count(), boot.id, boot.world_rank, &config);
    if (started != ncclSuccess && started != ncclInProgress)
      throw nccl_error(detail::nccl_message(started, "ncclCommInitRankConfig", __FILE__, __LINE__));
    detail::await_ready(world, "ncclCommInitRankConfig (world)", watch);
    // Owned at once, so that a failure below aborts it (NcclCommunicator's destructor).
    auto world_comm = std::make_unique<model>(NcclCommunicator(
        world, members(mesh, boot.world_rank, masks - 1), tpx::detail::axes_label<MeshT>(masks - 1),
        resources, of_group(watch, masks - 1)));
    const auto hosts = std::make_shared<const std::vector<std::string>>(world_comm->impl().gather_hosts(this_host()));
    world_comm->impl().name_hosts(hosts);
    for (unsigned mask = 1; mask + 1 < masks; ++mask) {
      ncclConfig_t split_config = detail::nonblocking_config();
      ncclComm_t part = nullptr;
      const ncclResult_t status =
          ncclCommSplit(world, tpx::detail::coords_off_axes(mesh, boot.world_rank, mask), boot.world_rank, &part,
                        &split_config);
      if (status != ncclSuccess && status != ncclInProgress)
        throw nccl_error(detail::nccl_message(status, "ncclCommSplit", __FILE__, __LINE__));
      // A nonblocking split fills in `part` only once the parent's state has left ncclInProgress
      // (NCCL 2.28 on an H200: NVIDIA/nccl#1472; PyTorch's ProcessGroupNCCL waits the same way),
      // so the world is polled first; polling the still-null `part` fails with "invalid argument".
      detail::await_ready(world, "ncclCommSplit (the world communicator it splits)", watch, true);
      if (part == nullptr)
        throw nccl_error("tpx: ncclCommSplit: the world communicator is ready but gave no communicator for " +
                         tpx::detail::axes_label<MeshT>(mask));
      detail::await_ready(part, "ncclCommSplit", watch);
      comms_.push_back(std::make_unique<model>(NcclCommunicator(
          part, members(mesh, boot.world_rank, mask), tpx::detail::axes_label<MeshT>(mask),
          resources, of_group(watch, mask))));
      comms_.back()->impl().name_hosts(hosts);
    }
    comms_.push_back(std::move(world_comm));
    groups_.assign(masks, nullptr);
    for (unsigned mask = 1; mask < masks; ++mask) groups_[mask] = comms_[mask - 1].get();
  }

  // groups()[mask]: the communicator of the axes in mask (bit i = axis i); [0] is unused.
  const std::vector<any_communicator*>& groups() const { return groups_; }
  // The NCCL communicator of the axes in mask, for what any_communicator does not offer (send,
  // recv, wait_all).
  NcclCommunicator& nccl(unsigned mask) { return comms_[mask - 1]->impl(); }

  // When the rank's function has returned: posts the "returned" record on every communicator at
  // once, then polls them all until each has every peer's (NcclCommunicator::post_return), so
  // that a peer waiting in a collective of any of the rank's groups fails at once. Does nothing
  // unless collectives are checked.
  // A watcher (nccl_watch::watcher) hears that the rank has returned while it waits.
  void return_from_groups(tpx::detail::exchange_watcher* watcher) {
    for (auto& comm : comms_) comm->impl().post_return();
    const auto start = std::chrono::steady_clock::now();
    for (bool all_checked = false; !all_checked; std::this_thread::yield()) {
      all_checked = true;
      for (auto& comm : comms_) all_checked = comm->impl().return_checked() && all_checked;
      if (!all_checked && watcher != nullptr)
        watcher->waiting({}, std::chrono::steady_clock::now() - start);
    }
    if (watcher != nullptr) watcher->done_waiting();
  }

 private:
  // The watch of the communicator of the axes in mask: its group id for the watcher.
  static nccl_watch of_group(nccl_watch watch, unsigned mask) {
    watch.group = mask;
    return watch;
  }

  // The world ranks of `rank`'s group of the axes in mask, in group-rank order (the split's key
  // is the world rank): ranks with equal coordinates on every axis outside mask.
  static std::vector<int> members(const MeshT& mesh, int rank, unsigned mask) {
    std::vector<int> ranks;
    for (int r = 0; r < mesh.rank_count(); ++r)
      if (tpx::detail::coords_off_axes(mesh, r, mask) == tpx::detail::coords_off_axes(mesh, rank, mask))
        ranks.push_back(r);
    return ranks;
  }

  using model = communicator_model<NcclCommunicator>;

  std::vector<std::unique_ptr<model>> comms_;  // [mask - 1]
  std::vector<any_communicator*> groups_;
};

}  // namespace tpx::cuda

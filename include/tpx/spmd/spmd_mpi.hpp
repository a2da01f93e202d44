// spmd(tpx::mpi, mesh, fn): run fn on this process's rank of the mesh, one rank per MPI process,
// for programs started by `mpirun -np <ranks>` (or srun): the thread backend's program, unchanged,
// on many processes and machines.
//
// Every process calls spmd with the same mesh. The launcher initializes MPI if the program has
// not (comm/mpi_environment.hpp), checks that the job has exactly mesh.rank_count() processes
// (else every process throws spmd_error naming both numbers and its host, so nothing hangs) and
// that every process runs the same build on the same mesh (spmd/mpi_fingerprint.hpp: else every
// process throws spmd_error naming the differing ranks, their hosts and the field), takes its
// mesh rank from its MPI_COMM_WORLD rank (the mesh's row-major order: the last axis varies
// fastest), and splits MPI_COMM_WORLD once per set of mesh axes, as the thread backend registers
// its groups (color: the coordinates on the other axes; key: the world rank, so group ranks
// follow world ranks). mpirun places consecutive ranks on the same node by default, so the last
// mesh axis should be the one that communicates most: tensor parallelism inside a node,
// FSDP/data parallelism across nodes. Collectives are bit for bit the thread backend's
// (comm/mpi_communicator.hpp).
//
// When fn throws on a rank, the others cannot be told in MPI: they would wait for it forever in
// their next collective. The rank therefore prints "tpx: rank 2 (X=1, Y=0) on host node3 failed:
// <what>" to stderr, as the thread backend's spmd_error words it, and calls MPI_Abort, which ends
// every process of the job with a failing exit status. Ranks whose control flow diverged are
// caught as on the thread backend: before each collective the group's ranks exchange what they
// are about to call (comm/mpi_communicator.hpp), so a rank that skips a collective, adds one or
// calls another makes every rank of the group fail at once, naming the collective's number, the
// group, and who called what on which host. When fn returns, the rank posts a "returned" record
// as the next exchange of each of its groups and waits for its peers' records: a peer waiting in
// a collective it never joined fails at once ("... returned without joining it"), and the ranks
// of a correct program finish together. Every wait for peers is bounded by
// spmd_options::timeout (the trainers' --timeout), and ranks that wait in each other's
// collectives (a cycle: one in a collective of group Y, its peer in one of group X) are reported
// by world rank 0 about a second after the cycle forms, with who waits where for whom
// (comm/mpi_watchdog.hpp). Each of these failures ends the job as a throwing rank does: the
// message on stderr, then MPI_Abort. spmd_options::blas_threads applies too: by default each
// process's BLAS calls share the node's hardware threads with the other ranks on that node.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpx/comm/any_communicator.hpp"
#include "tpx/comm/mpi_communicator.hpp"
#include "tpx/comm/mpi_environment.hpp"
#include "tpx/comm/mpi_errors.hpp"
#include "tpx/comm/mpi_watchdog.hpp"
#include "tpx/kernels/blas_threads.hpp"
#include "tpx/launch/mpi_processes.hpp"  // processes_of(tpx::mpi), always with the launcher
#include "tpx/launch/started_by_mpi.hpp"
#include "tpx/sharding/mesh.hpp"
#include "tpx/spmd/mpi_fingerprint.hpp"
#include "tpx/spmd/rank.hpp"
#include "tpx/spmd/spmd.hpp"

namespace tpx {

// Selects the MPI backend: one process per rank, MPI collectives.
struct mpi_backend {
  using options = spmd_options;
};
inline constexpr mpi_backend mpi{};

namespace detail {
// How many processes of the job share this node (MPI_COMM_TYPE_SHARED).
inline int mpi_ranks_on_this_node() {
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
      MPI_SUCCESS)
    return 1;
  int ranks = 1;
  MPI_Comm_size(node, &ranks);
  MPI_Comm_free(&node);
  return ranks;
}

// Reports that this rank failed and ends the whole job (see the top of the file).
[[noreturn]] inline void abort_mpi_job(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return
}

// When fn has returned on this rank: posts the "returned" record on each of its groups and waits
// until every peer has posted its own, so that a peer still waiting in a collective this rank
// never joins fails at once, and a correct program's ranks all finish together (see the top of
// the file).
inline void return_from_groups(std::span<MpiCommunicator* const> groups, MpiWatchdog& watchdog) {
  std::vector<MPI_Request> requests;
  std::vector<MpiCommunicator*> told;
  for (MpiCommunicator* group : groups) {
    const MPI_Request request = group->post_return();
    if (request == MPI_REQUEST_NULL) continue;
    requests.push_back(request);
    told.push_back(group);
  }
  if (!watchdog.wait(requests, {}, [&](std::size_t i) { told[i]->check_return(); })) {
    std::string open;
    for (std::size_t i = 0; i < requests.size(); ++i)
      if (requests[i] != MPI_REQUEST_NULL)
        open += (open.empty() ? "" : "; ") + told[i]->exchange_name();
    throw comm_error(
        "tpx: " + watchdog.me() + " returned, but not every rank of its groups did within " +
        std::to_string(watchdog.timeout().count()) + " ms (" + open +
        "): some rank still computes or waits in a collective." + watchdog.last_heard());
  }
  watchdog.finish();
}
}  // namespace detail

template <MeshAxis... Axes, class Fn>
void spmd(mpi_backend, const Mesh<Axes...>& mesh, Fn&& fn, spmd_options options = {}) {
  using MeshT = Mesh<Axes...>;
  constexpr unsigned masks = 1u << MeshT::axis_count;
  detail::ensure_mpi_initialized();
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int r = 0;
  int processes = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  const std::string host = detail::mpi_host_name();
  if (processes != mesh.rank_count()) {
    throw spmd_error(
        r, "tpx: the mesh (" + mesh.to_string() + ") has " + std::to_string(mesh.rank_count()) +
               " ranks but MPI started " + std::to_string(processes) +
               " processes (seen by MPI rank " + std::to_string(r) + " on host " + host +
               "); start one process per rank: " + mpi_launch_command(mesh.rank_count()));
  }
  std::vector<std::string> hosts = detail::hosts_of_an_alike_job(mesh.to_string(), r);
  kernels::set_blas_threads(
      detail::blas_threads_per_rank(options.blas_threads, detail::mpi_ranks_on_this_node()));

  // Declared outside the try, so that a failing rank aborts the job while they live: an exchange
  // that never completed may still write into a communicator's records. Declared after the
  // watchdog, the communicators are destroyed before it.
  std::unique_ptr<detail::MpiWatchdog> watchdog;
  std::vector<std::unique_ptr<communicator_model<MpiCommunicator>>> comms;
  try {
    watchdog = std::make_unique<detail::MpiWatchdog>(std::move(hosts), options.timeout,
                                                     detail::mesh_group_layout(mesh));
    std::vector<any_communicator*> groups(masks, nullptr);
    std::vector<MpiCommunicator*> mpi_groups;
    for (unsigned mask = 1; mask < masks; ++mask) {
      MPI_Comm group;
      detail::check_mpi(
          MPI_Comm_split(MPI_COMM_WORLD, detail::coords_off_axes(mesh, r, mask), r, &group),
          "MPI_Comm_split",
          "building the groups of " + detail::axes_label<MeshT>(mask) + " on " +
              detail::rank_label(mesh, r) + " on host " + host);
      comms.push_back(std::make_unique<communicator_model<MpiCommunicator>>(
          MpiCommunicator(group, detail::axes_label<MeshT>(mask), *watchdog, mask)));
      groups[mask] = comms.back().get();
      mpi_groups.push_back(&comms.back()->impl());
    }
    Rank<MeshT> rank(mesh, r, detail::axis_places(mesh, r), std::move(groups));
    fn(rank);
    detail::return_from_groups(mpi_groups, *watchdog);
  } catch (const std::exception& e) {
    detail::abort_mpi_job("tpx: " + detail::rank_label(mesh, r) + " on host " + host +
                          " failed: " + e.what());
  } catch (...) {
    detail::abort_mpi_job("tpx: " + detail::rank_label(mesh, r) + " on host " + host +
                          " failed with a non-standard exception");
  }
}

}  // namespace tpx

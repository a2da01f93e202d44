// spmd(tpx::host, mesh, fn): run fn once per rank of the mesh, each rank a thread of this
// process, the way a GPU cluster runs one process per device.
//
// This is tpx's default backend, so every program runs, and is tested, on any machine: it is
// the analogue of JAX's forced host devices and PyTorch's threaded process group. The launcher
// registers one communicator group per set of mesh axes (the rows, the columns, the whole mesh
// ...) before the threads start, gives each rank a Rank<Mesh> that finds them, and shares the
// cores among the ranks' BLAS calls: each call may use the cores the ranks leave idle
// (hardware threads / ranks, at least 1, at most OPENBLAS_NUM_THREADS when set;
// options.blas_threads overrides), so a 1x1 mesh on a
// many-core machine runs its GEMMs on every core and a mesh of as many ranks as cores runs each
// rank's GEMMs on its own thread. OpenBLAS's work buffers for all of them are allocated before
// the ranks start, as many as fit in memory: with fewer, a rank's GEMM waits for a free one.
//
// If a rank throws, the others' pending and future collectives fail at once (comm_error naming
// the rank), every thread is joined, and spmd rethrows the first failure as spmd_error,
// "rank 2 (X=1, Y=0) failed: ...", with the original exception nested. When a rank returns, a
// collective it never joined can never complete: the ranks waiting in it, or coming to it later,
// fail at once, naming the collective (its number on its group, the mesh axes, the call), who
// joined it and who returned, rather than after the timeout: the usual cause is a collective
// inside `if (rank.world_rank() == 0)`. When no rank returns but every one waits in a
// collective that can never complete (a cycle: rank 0 in its row's collective, the others in the
// mesh's; or one rank calls a collective more while the others go on to the next), they fail at
// once, each naming every wait: which collective of which group and who never came. A rank that
// waits longer than options.timeout for its group fails the same way, naming who never arrived.
//
// Each rank also gets a communication thread (spmd/communication_thread.hpp), started by its
// first background task (tpx::in_background, spmd/background.hpp), with communicators of its own:
// every group set is registered twice, once for the ranks' own threads and once for their
// communication threads ("mesh axis X, communication thread" in messages), so the collectives of
// the two threads of a rank never meet in one group's order. A failed background task aborts the
// world like a rank that throws, and a rank's communication thread is joined before the rank
// counts as returned.
//
// Running out of resources is such a failure too. A rank that runs out of memory fails with
// "rank 2 (X=1, Y=0) failed: out of memory: cannot allocate 4.00 GiB (...) for a tensor in host
// memory" (allocation_error, tensor/allocation_error.hpp; "std::bad_alloc" where the allocation
// was not a tensor's). A rank whose thread cannot be started fails with "its thread could not be
// started (<why>; ...)": the ranks already running are released and joined, no later rank is
// started, and the process never ends in std::terminate.
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tpx/comm/any_communicator.hpp"
#include "tpx/comm/host_communicator.hpp"
#include "tpx/comm/host_world.hpp"
#include "tpx/comm/wait_picture.hpp"
#include "tpx/kernels/blas_threads.hpp"
#include "tpx/kernels/blas_work_buffers.hpp"
#include "tpx/sharding/mesh.hpp"
#include "tpx/spmd/communication_thread.hpp"
#include "tpx/spmd/rank.hpp"

namespace tpx {

struct spmd_options {
  // How long a rank waits for its group in a collective before failing, on the host and MPI
  // backends (under MPI also how long a returned rank waits for the others to return).
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // Threads each BLAS call may use; 0: the hardware threads divided among the ranks (under MPI,
  // among the ranks on this node).
  int blas_threads = 0;
};

// Selects the host backend: one thread per rank, shared-memory collectives. Every backend names
// the type of spmd's last argument as `options`, so that code generic over the backend (the
// example trainers) can set the timeout whichever runs the ranks.
struct host_backend {
  using options = spmd_options;
};
inline constexpr host_backend host{};

class spmd_error : public std::runtime_error {
 public:
  spmd_error(int rank, const std::string& what) : std::runtime_error(what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

namespace detail {
// Rank r's coordinates on the axes not in mask, as one number: equal exactly for the ranks of
// one group of that set of axes (the MPI launcher's color for MPI_Comm_split).
template <class MeshT>
int coords_off_axes(const MeshT& mesh, int r, unsigned mask) {
  int key = 0;
  for (int a = 0; a < MeshT::axis_count; ++a)
    if (!(mask & (1u << a))) key = key * mesh.size(a) + mesh.coord(r, a);
  return key;
}

// The groups of a set of mesh axes: ranks that agree on every other axis, in rank order.
template <class MeshT>
std::vector<std::vector<int>> groups_of_axes(const MeshT& mesh, unsigned mask) {
  std::vector<std::vector<int>> groups;
  std::vector<int> group_of_key;
  for (int r = 0; r < mesh.rank_count(); ++r) {
    const int key = coords_off_axes(mesh, r, mask);
    if (key >= static_cast<int>(group_of_key.size())) group_of_key.resize(key + 1, -1);
    if (group_of_key[key] < 0) {
      group_of_key[key] = static_cast<int>(groups.size());
      groups.emplace_back();
    }
    groups[group_of_key[key]].push_back(r);
  }
  return groups;
}

// Threads per BLAS call: `requested` if positive, else the hardware threads divided among the
// ranks, at most OPENBLAS_NUM_THREADS when the environment sets it (the sanitizer presets set 1).
inline int blas_threads_per_rank(int requested, int ranks) {
  if (requested > 0) return requested;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int threads = std::max(1, cores / ranks);
  if (const char* env = std::getenv("OPENBLAS_NUM_THREADS")) {
    const int limit = std::atoi(env);
    if (limit >= 1) threads = std::min(threads, limit);
  }
  return threads;
}

// "mesh axis X", "mesh axes X, Y": the axes of a set of groups, for error messages.
template <class MeshT>
std::string axes_label(unsigned mask) {
  std::string names;
  for (int a = 0; a < MeshT::axis_count; ++a) {
    if (!(mask & (1u << a))) continue;
    if (!names.empty()) names += ", ";
    names += MeshT::name(a);
  }
  return (std::popcount(mask) == 1 ? "mesh axis " : "mesh axes ") + names;
}

// The groups of `mesh` as a watcher's picture names them (comm/wait_picture.hpp): id = the axis
// set's bit mask.
template <class MeshT>
GroupLayout mesh_group_layout(const MeshT& mesh) {
  GroupLayout layout{.ids = 1u << MeshT::axis_count, .labels = {""}, .color = {}};
  for (unsigned mask = 1; mask < layout.ids; ++mask)
    layout.labels.push_back(axes_label<MeshT>(mask));
  layout.color = [mesh](unsigned mask, int r) { return coords_off_axes(mesh, r, mask); };
  return layout;
}

// "rank 2 (X=1, Y=0)": a rank and its place on the mesh, for error messages.
template <class MeshT>
std::string rank_label(const MeshT& mesh, int rank) {
  std::string text = "rank " + std::to_string(rank) + " (";
  for (int a = 0; a < MeshT::axis_count; ++a)
    text +=
        (a ? ", " : "") + std::string(MeshT::name(a)) + "=" + std::to_string(mesh.coord(rank, a));
  return text + ")";
}

// Rank r's place on every axis of the mesh, in the mesh's axis order.
template <MeshAxis... Axes>
std::vector<axis_place> axis_places(const Mesh<Axes...>& mesh, int r) {
  std::vector<axis_place> axes;
  int a = 0;
  ((axes.push_back({&axis_key<Axes>, Axes::name.c_str(), mesh.size(a), mesh.coord(r, a)}), ++a),
   ...);
  return axes;
}
}  // namespace detail

template <MeshAxis... Axes, class Fn>
void spmd(host_backend, const Mesh<Axes...>& mesh, Fn&& fn, spmd_options options = {}) {
  using MeshT = Mesh<Axes...>;
  constexpr unsigned masks = 1u << MeshT::axis_count;
  const int ranks = mesh.rank_count();
  HostWorld world(ranks, HostWorldOptions{options.timeout});
  // [mask]: the group set of the ranks' own threads, and that of their communication threads.
  std::vector<int> set_of_mask(masks, HostWorld::whole_world);
  std::vector<int> background_set_of_mask(masks, HostWorld::whole_world);
  for (unsigned mask = 1; mask < masks; ++mask) {
    const auto groups = detail::groups_of_axes(mesh, mask);
    const std::string label = detail::axes_label<MeshT>(mask);
    set_of_mask[mask] = world.add_groups(groups, label);
    background_set_of_mask[mask] = world.add_groups(groups, label + ", communication thread",
                                                    detail::RankThread::communication);
  }

  kernels::set_blas_threads(detail::blas_threads_per_rank(options.blas_threads, ranks));

  // OpenBLAS's work buffers for every rank inside BLAS at once, as many as fit, allocated before
  // any rank runs; when fewer fit, ranks wait for one (kernels/blas_work_buffers.hpp).
  kernels::reserve_blas_buffers(ranks);

  std::vector<std::exception_ptr> failures(ranks);
  auto run_rank = [&](int r) {
    try {
      kernels::wait_for_reserved_blas_buffers();
      std::vector<std::unique_ptr<communicator_model<HostCommunicator>>> comms;
      const auto communicators = [&](const std::vector<int>& set_of) {
        std::vector<any_communicator*> groups(masks, nullptr);
        for (unsigned mask = 1; mask < masks; ++mask) {
          comms.push_back(std::make_unique<communicator_model<HostCommunicator>>(
              HostCommunicator(world, set_of[mask], r)));
          groups[mask] = comms.back().get();
        }
        return groups;
      };
      Rank<MeshT> rank(mesh, r, detail::axis_places(mesh, r), communicators(set_of_mask));
      // Declared after the rank and the communicators it uses, so destroyed (joined) first.
      communication_thread background(
          rank, [&world, r](std::string_view what) { world.abort(r, what); },
          [&world, r](detail::RankThread thread, bool idle) { world.set_idle(r, thread, idle); });
      rank.set_communication_thread(&background, communicators(background_set_of_mask));
      fn(rank);
      background.finish();
      world.finish(r);
    } catch (const std::exception& e) {
      failures[r] = std::current_exception();
      world.abort(r, e.what());
    } catch (...) {
      failures[r] = std::current_exception();
      world.abort(r, "unknown exception");
    }
  };
  // A rank whose thread cannot start (the process is at its limit of threads or of address
  // space: std::system_error, or std::bad_alloc) fails like a rank that throws: the ranks
  // already running are released from their collectives and joined, and no later rank starts.
  std::vector<std::thread> threads;
  threads.reserve(ranks);
  int unstarted = -1;
  for (int r = 0; r < ranks && unstarted < 0; ++r) {
    try {
      threads.emplace_back(run_rank, r);
    } catch (...) {
      unstarted = r;
      failures[r] = std::current_exception();
      world.abort(r, "its thread could not be started");
    }
  }
  for (std::thread& t : threads) t.join();

  // The root cause: the first failure that is not another rank's failure reported back.
  int first = -1;
  for (int r = 0; r < ranks && first < 0; ++r) {
    if (!failures[r]) continue;
    try {
      std::rethrow_exception(failures[r]);
    } catch (const comm_error&) {
    } catch (...) {
      first = r;
    }
  }
  for (int r = 0; r < ranks && first < 0; ++r)
    if (failures[r]) first = r;
  if (first < 0) return;
  const std::string failed = "tpx: " + detail::rank_label(mesh, first) + " failed: ";
  try {
    std::rethrow_exception(failures[first]);
  } catch (const std::exception& e) {
    if (first == unstarted)
      std::throw_with_nested(spmd_error(
          first, failed + "its thread could not be started (" + e.what() +
                     "; the process may be at its limit of threads or of memory: see ulimit -u "
                     "and ulimit -v)"));
    if (dynamic_cast<const std::bad_alloc*>(&e))
      std::throw_with_nested(spmd_error(first, failed + "out of memory: " + e.what()));
    std::throw_with_nested(spmd_error(first, failed + e.what()));
  } catch (...) {
    std::throw_with_nested(spmd_error(first, "tpx: " + detail::rank_label(mesh, first) +
                                                 " failed with a non-standard exception"));
  }
}

}  // namespace tpx

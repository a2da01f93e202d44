// spmd(tpx::dry_run, mesh, fn): runs fn once per rank of the mesh without computing or moving
// anything, to learn what a real run of fn would take: each rank's tensor memory, the FLOPs of
// its matrix products and what its collectives would move over each set of mesh axes. It answers
// "does this model fit on this mesh, and how much does each axis carry" for a cluster of any size,
// on a laptop, from the program itself rather than from a second description of it (as PyTorch's
// meta device with a fake process group, or JAX's compiled memory analysis, do).
//
// Each rank's tensors are meta tensors (tensor/meta_space.hpp: shapes whose memory is counted on
// the rank's memory_meter but never allocated, and whose products count their FLOPs), and its
// communicators are silent ones of the right size, which move nothing and return at once: so the
// ranks need not meet, and run one after another on the calling thread, rank 0 first. Every
// communicator counts what it is asked to move as a real one does (comm/collective_traffic.hpp),
// so rank.traffic_by_axes() reads the same as in a real run of fn. A rank is a
// tpx::MetaRank<Mesh>, a tpx::Rank<Mesh> whose factories make meta tensors, so a program written
// against `auto& rank` runs unchanged; what it must not do is decide anything from the values of
// its tensors (to_host leaves the host's memory as it was). A rank that throws stops the run with
// spmd_error, "tpx: rank 2 (X=1, Y=0) failed: ...", as on the other backends. The rank has no
// communication thread: tpx::in_background runs its task at once, which allocates and moves what
// the task would, in the same order, but on a second set of silent communicators, as the host
// launcher's communication thread does: so rank.traffic_by_axes(traffic_part::background) says,
// as in a real run, which of the traffic a program overlaps with its computation; and
// record_timeline / take_timeline give the order of it (dry_run_timeline.hpp): the rank's work
// between each task's start and the wait for it, what a cost model needs to price the overlap.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "tpx/comm/any_communicator.hpp"
#include "tpx/sharding/mesh.hpp"
#include "tpx/spmd/background_lane.hpp"
#include "tpx/spmd/dry_run_timeline.hpp"
#include "tpx/spmd/rank.hpp"
#include "tpx/spmd/spmd.hpp"
#include "tpx/tensor/meta_space.hpp"

namespace tpx {

struct dry_run_backend {};
inline constexpr dry_run_backend dry_run{};

// A rank of a dry run: its tensors are meta tensors.
template <class MeshT>
class MetaRank : public Rank<MeshT> {
 public:
  using space = meta_space;
  using Rank<MeshT>::Rank;
};

// A group of `size` ranks that moves nothing: every collective returns at once.
class silent_communicator {
 public:
  silent_communicator(int size, int rank) : size_(size), rank_(rank) {}
  int size() const { return size_; }
  int rank() const { return rank_; }
  void barrier() {}
  template <class T>
  void all_gather(std::span<const T>, std::span<T>, std::span<const std::size_t>) {}
  template <class T>
  void reduce_scatter(std::span<const T>, std::span<T>, std::span<const std::size_t>) {}
  template <class T>
  void all_reduce(std::span<const T>, std::span<T>, reduction = reduction::sum) {}
  template <class T>
  void all_to_all(std::span<const T>, std::span<T>, std::span<const std::size_t>) {}
  template <class T>
  void broadcast(std::span<const T>, std::span<T>, int) {}

 private:
  int size_;
  int rank_;
};

// A dry-run rank's backend state: the FLOPs its meta tensors count, a background lane on which
// tpx::in_background runs a task at once, with the task's collectives on the rank's background
// communicators (rank_context::group() hands those out on the rank's communication thread, which
// the calling thread stands for while the task runs), and the rank's timeline when it is
// recorded (dry_run_timeline.hpp).
class dry_run_state final : public meta_counter, public background_lane {
 public:
  explicit dry_run_state(const rank_context& rank) : timeline(rank, matrix_flops), rank_(&rank) {}
  background_lane* lane() override { return this; }
  void enter() override {
    started_ = timeline.task_started();
    detail::communication_thread_of = rank_;
  }
  std::unique_ptr<lane_join> leave() override {
    detail::communication_thread_of = nullptr;
    timeline.task_ended(started_);
    return std::make_unique<done>(timeline, started_);
  }
  bool entered() const override { return detail::communication_thread_of == rank_; }

  detail::timeline_recorder timeline;

 private:
  // The task ran at once: nothing to wait for but the wait, which the timeline records.
  struct done final : lane_join {
    done(detail::timeline_recorder& timeline, int task) : timeline(timeline), task(task) {}
    void wait() override { timeline.task_waited(task); }
    detail::timeline_recorder& timeline;
    int task;
  };
  const rank_context* rank_;
  int started_ = -1;
};

// The matrix FLOPs the rank's meta tensors have counted so far (0 outside a dry run).
inline double dry_run_flops(const rank_context& rank) {
  const auto* counter = dynamic_cast<const meta_counter*>(rank.backend());
  return counter != nullptr ? counter->matrix_flops : 0;
}

// Starts recording the rank's timeline afresh (dry_run_timeline.hpp); nothing outside a dry run.
inline void record_timeline(const rank_context& rank) {
  if (auto* state = dynamic_cast<dry_run_state*>(rank.backend())) state->timeline.begin();
}
// The timeline recorded since record_timeline, which stops; empty outside a dry run.
inline std::vector<timeline_event> take_timeline(const rank_context& rank) {
  auto* state = dynamic_cast<dry_run_state*>(rank.backend());
  return state != nullptr ? state->timeline.take() : std::vector<timeline_event>{};
}

template <MeshAxis... Axes, class Fn>
void spmd(dry_run_backend, const Mesh<Axes...>& mesh, Fn&& fn) {
  using MeshT = Mesh<Axes...>;
  constexpr unsigned masks = 1u << MeshT::axis_count;
  for (int r = 0; r < mesh.rank_count(); ++r) {
    std::vector<std::unique_ptr<communicator_model<silent_communicator>>> comms;
    std::vector<any_communicator*> groups(masks, nullptr), background_groups(masks, nullptr);
    for (unsigned mask = 1; mask < masks; ++mask) {
      int size = 1, index = 0;  // the group's ranks, and r's place among them (rank order)
      for (int a = 0; a < MeshT::axis_count; ++a)
        if (mask & (1u << a)) size *= mesh.size(a), index = index * mesh.size(a) + mesh.coord(r, a);
      for (std::vector<any_communicator*>* set : {&groups, &background_groups}) {
        comms.push_back(std::make_unique<communicator_model<silent_communicator>>(
            silent_communicator(size, index)));
        (*set)[mask] = comms.back().get();
      }
    }
    MetaRank<MeshT> rank(mesh, r, detail::axis_places(mesh, r), std::move(groups));
    rank.set_communication_thread(nullptr, std::move(background_groups));
    dry_run_state state(rank);
    rank.set_backend(&state);
    try {
      fn(rank);
    } catch (const std::exception& e) {
      std::throw_with_nested(spmd_error(r, "tpx: " + detail::rank_label(mesh, r) + " failed: " + e.what()));
    } catch (...) {
      std::throw_with_nested(
          spmd_error(r, "tpx: " + detail::rank_label(mesh, r) + " failed with a non-standard exception"));
    }
  }
}

}  // namespace tpx

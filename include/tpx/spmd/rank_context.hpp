// rank_context: what one rank knows about where it stands: its place on each mesh axis and the
// communicator of every set of axes.
//
// Every tensor keeps a pointer to the context of the rank that made it, so that collectives on
// it (all_gather<X>(t), matmul(a, b)) find the ranks along X without the user passing them.
// Axes are looked up by type at run time through a per-type key; the typed Rank<Mesh> in
// rank.hpp performs the same lookups at compile time where it can.
//
// A rank may also have a communication thread (spmd/communication_thread.hpp, the host
// launcher's), which runs collectives in the background while the rank's own thread computes.
// It has communicators of its own, one per set of axes like the rank's: host groups match calls
// by their order, so collectives issued from two threads of a rank must never share a group.
// group<Axes...>() therefore answers by the calling thread: on the rank's communication thread
// it is that thread's communicator, elsewhere the rank's. Every typed op (all_gather, reshard,
// the adjoint steps) so runs unchanged on either thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpx/comm/any_communicator.hpp"
#include "tpx/sharding/mesh_axis.hpp"
#include "tpx/spmd/background_lane.hpp"
#include "tpx/spmd/recorded_work.hpp"
#include "tpx/tensor/memory_meter.hpp"

namespace tpx {

class rank_context;
class communication_thread;

namespace detail {
// The rank whose communication thread is the calling thread, or null on any other thread.
inline thread_local const rank_context* communication_thread_of = nullptr;
}  // namespace detail

// A distinct address per axis type: its identity at run time.
template <class Axis>
inline constexpr char axis_key = 0;

struct axis_place {
  const void* key = nullptr;  // &axis_key<Axis>
  const char* name = "";
  int size = 1;   // ranks along the axis
  int coord = 0;  // this rank's coordinate on it
};

// Which of a rank's traffic to count: all of it, or what its background tasks moved.
enum class traffic_part { all, background };

// A rank's communication so far, in seconds: all of it, and the part its computation waited for
// (tpx::communication_time, spmd/background.hpp).
struct communication_seconds {
  double total = 0;
  double exposed = 0;
};

// What a backend keeps for one rank besides its communicators: for CUDA, the rank's device,
// stream, memory pool and cuBLASLt handle (cuda/rank_resources.hpp). The launcher owns it, sets
// it with set_backend() before the rank's function runs and keeps it alive until that function
// returns; the memory space of a tensor finds it through the tensor's context. The host backend
// sets none. A backend that queues work (CUDA) also offers a background lane, where
// tpx::in_background runs a rank's tasks when the rank has no communication thread
// (spmd/background_lane.hpp), and recordings of work (spmd/recorded_work.hpp).
class backend_state {
 public:
  virtual ~backend_state() = default;
  // The rank's background lane, or null if the backend has none.
  virtual background_lane* lane() { return nullptr; }
  // The rank's communication as the backend measures it, or nullopt where the time the rank's
  // threads spend in collectives is the measure (the host's).
  virtual std::optional<communication_seconds> measured_communication() { return std::nullopt; }
  // The work `work` queues, recorded without running it, for replays; null where the backend does
  // its work as it is called (the host), so that recording means nothing. Throws where the work
  // cannot be recorded, saying why.
  virtual std::unique_ptr<recorded_work> record(const std::function<void()>& /*work*/) {
    return nullptr;
  }
};

class rank_context {
 public:
  // groups[mask] is the communicator of the ranks that share this rank's coordinates on every
  // axis not in mask (bit i = axes[i]); groups[0] is unused.
  rank_context(int world_rank, int world_size, std::vector<axis_place> axes,
               std::vector<any_communicator*> groups)
      : world_rank_(world_rank),
        world_size_(world_size),
        axes_(std::move(axes)),
        groups_(std::move(groups)) {}

  // This rank's backend state, or nullptr (the host backend has none).
  backend_state* backend() const { return backend_; }
  void set_backend(backend_state* state) { backend_ = state; }

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  const std::vector<axis_place>& axes() const { return axes_; }

  template <MeshAxis A>
  int axis_index() const {
    for (std::size_t i = 0; i < axes_.size(); ++i)
      if (axes_[i].key == &axis_key<A>) return static_cast<int>(i);
    throw std::invalid_argument("tpx: rank " + std::to_string(world_rank_) + ": mesh axis " +
                                std::string(A::name.c_str()) + " is not an axis of the mesh (" +
                                mesh_string() + ")");
  }
  // Whether A is an axis of this rank's mesh (axis_index<A>() throws when it is not).
  template <MeshAxis A>
  bool has_axis() const {
    for (const axis_place& a : axes_)
      if (a.key == &axis_key<A>) return true;
    return false;
  }
  template <MeshAxis A>
  const axis_place& axis() const {
    return axes_[axis_index<A>()];
  }

  // The communicator of the ranks that differ from this one only along Axes: the communication
  // thread's own when called on this rank's communication thread.
  template <MeshAxis... Axes>
  any_communicator& group() const {
    const unsigned mask = ((1u << axis_index<Axes>()) | ...);
    return detail::communication_thread_of == this ? *background_groups_[mask] : *groups_[mask];
  }

  // The tensor memory this rank holds, and the most it has held (tensor/memory_meter.hpp).
  memory_meter& memory() const { return memory_; }

  // The rank's communication thread and its communicators (indexed like groups), set by a
  // launcher that gives its ranks one (the host's), which keeps both alive while the rank runs.
  void set_communication_thread(communication_thread* thread,
                                std::vector<any_communicator*> groups) {
    communication_thread_ = thread;
    background_groups_ = std::move(groups);
  }
  // Null where the launcher gives none: tpx::in_background then runs its task at once.
  communication_thread* communication() const { return communication_thread_; }

  // Wall time this rank's own thread has spent in collectives so far (the communication
  // thread's: communication_thread::busy_seconds).
  double collective_seconds() const {
    double total = 0;
    for (const any_communicator* g : groups_)
      if (g != nullptr) total += g->collective_seconds();
    return total;
  }

  // What this rank's collectives have moved, per set of axes, indexed like the groups (bit i =
  // axes()[i]; [0] unused): its own thread's and its communication thread's together, or with
  // traffic_part::background only the communication thread's, what background tasks moved while
  // the rank's own thread computed (spmd/background.hpp; the host launcher's and a dry run's: a
  // CUDA rank's tasks share its communicators and count as its own).
  std::vector<collective_traffic> traffic_by_axes(traffic_part part = traffic_part::all) const {
    std::vector<collective_traffic> traffic(groups_.size());
    for (std::size_t mask = 1; mask < groups_.size(); ++mask) {
      if (groups_[mask] != nullptr && part == traffic_part::all)
        traffic[mask] += groups_[mask]->traffic();
      if (mask < background_groups_.size() && background_groups_[mask] != nullptr)
        traffic[mask] += background_groups_[mask]->traffic();
    }
    return traffic;
  }
  // traffic_by_axes(part) by the names of the axes, {"X", ...}, {"Y", ...}, {"X, Y", ...}, in the
  // same order, for the sets whose groups hold more than one rank (a group of one moves nothing).
  std::vector<axes_traffic> traffic_by_axis_names(traffic_part part = traffic_part::all) const {
    return named_by_axes(traffic_by_axes(part));
  }
  // A list indexed like traffic_by_axes' (a difference of two, say) by the names of the axes.
  std::vector<axes_traffic> named_by_axes(const std::vector<collective_traffic>& traffic) const {
    std::vector<axes_traffic> named;
    for (std::size_t mask = 1; mask < traffic.size(); ++mask) {
      std::string names;
      int ranks = 1;
      for (std::size_t a = 0; a < axes_.size(); ++a) {
        if (!(mask & (std::size_t{1} << a))) continue;
        names += (names.empty() ? "" : ", ") + std::string(axes_[a].name);
        ranks *= axes_[a].size;
      }
      if (ranks > 1) named.push_back({names, traffic[mask]});
    }
    return named;
  }
  // "X=2, Y=2"
  std::string mesh_string() const {
    std::string text;
    for (const axis_place& a : axes_)
      text += (text.empty() ? "" : ", ") + std::string(a.name) + "=" + std::to_string(a.size);
    return text;
  }

 private:
  int world_rank_;
  int world_size_;
  std::vector<axis_place> axes_;
  std::vector<any_communicator*> groups_;
  std::vector<any_communicator*> background_groups_;
  communication_thread* communication_thread_ = nullptr;
  backend_state* backend_ = nullptr;
  mutable memory_meter memory_;  // counted by the memory spaces, whoever holds a const context
};

}  // namespace tpx

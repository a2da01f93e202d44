// A rank's step as a dry run sees it, in order: the rank's own work between events (the FLOPs of
// its matrix products and what its own collectives put on the links), the start of each
// background task (tpx::in_background, with what its collectives put on the links) and each wait
// for one (pending::get). It is what a cost model needs to price overlap as the program does it,
// rather than as a bound: a task's collectives can hide only behind the work the rank does
// between the task's start and the wait for it, after the tasks started before it, as on the
// host's communication thread or a CUDA rank's second stream. tpx-plan --reports replays it on a
// hardware profile (examples/tpx-plan/dry_run_reports.hpp).
//
//   tpx::record_timeline(rank);            // from here (dry_run.hpp; nothing outside a dry run)
//   step(...);
//   std::vector<tpx::timeline_event> t = tpx::take_timeline(rank);
//
// A task's own products (it has none in the example programs: casts and collectives) are not the
// rank's work, and a task started inside another runs in it, its collectives counted as the outer
// task's. Tasks started before the recording began are not in it, nor their waits.
#pragma once

#include <cstddef>
#include <vector>

#include "tpx/comm/collective_traffic.hpp"
#include "tpx/spmd/rank_context.hpp"

namespace tpx {

struct timeline_event {
  enum class kind { work, start, wait };
  kind what = kind::work;
  int task = -1;            // start, wait: the task, numbered from 0 in the order they started
  double matrix_flops = 0;  // work: the rank's products since the event before
  std::vector<axes_traffic> traffic;  // work: the rank's own collectives'; start: the task's
};

namespace detail {

// Records a rank's timeline_events from a dry run's background lane (dry_run_state): the lane
// tells it when a task starts and ends and when the rank waits for one, and it reads the rank's
// FLOPs and traffic counters at each.
class timeline_recorder {
 public:
  timeline_recorder(const rank_context& rank, const double& matrix_flops)
      : rank_(rank), matrix_flops_(matrix_flops) {}

  void begin() {
    events_.clear();
    first_ = started_;
    recording_ = true;
    mark_own();
    flops_mark_ = matrix_flops_;
  }
  std::vector<timeline_event> take() {
    if (recording_) close_work();
    recording_ = false;
    return std::move(events_);
  }

  // A task starts (the rank's work up to here is one event); returns its number among the
  // rank's recorded tasks, or -1 when not recording.
  int task_started() {
    if (!recording_) return -1;
    close_work();
    events_.push_back({timeline_event::kind::start, started_ - first_, 0, {}});
    background_mark_ = rank_.traffic_by_axes(traffic_part::background);
    return started_++;
  }
  // The task that started last has run (a dry run runs each at once): what it moved is its
  // start's.
  void task_ended(int task) {
    if (!recording_ || task < 0) return;
    events_.back().traffic = rank_.named_by_axes(
        traffic_since(rank_.traffic_by_axes(traffic_part::background), background_mark_));
    flops_mark_ = matrix_flops_;  // what the task computed is not the rank's work
  }
  // The rank waits for a task: one of this recording's, or one started before it (not recorded).
  void task_waited(int task) {
    if (!recording_ || task < first_) return;
    close_work();
    events_.push_back({timeline_event::kind::wait, task - first_, 0, {}});
  }

 private:
  // The rank's own collectives so far, by set of axes (named only in the events: the marks are
  // taken at every event): all of its traffic less its background tasks'.
  std::vector<collective_traffic> own_traffic() const {
    return traffic_since(rank_.traffic_by_axes(), rank_.traffic_by_axes(traffic_part::background));
  }
  void mark_own() { own_mark_ = own_traffic(); }

  // The rank's work since the last event, as one event (none when it did nothing).
  void close_work() {
    std::vector<collective_traffic> own = own_traffic();
    const std::vector<collective_traffic> moved = traffic_since(own, own_mark_);
    const double flops = matrix_flops_ - flops_mark_;
    own_mark_ = std::move(own);
    flops_mark_ = matrix_flops_;
    if (flops > 0 || link_bytes(moved) > 0)
      events_.push_back({timeline_event::kind::work, -1, flops, rank_.named_by_axes(moved)});
  }

  const rank_context& rank_;
  const double& matrix_flops_;
  bool recording_ = false;
  std::vector<timeline_event> events_;
  int started_ = 0;  // the tasks recorded, in every recording
  int first_ = 0;    // the first of this recording's
  double flops_mark_ = 0;
  std::vector<collective_traffic> own_mark_, background_mark_;
};

}  // namespace detail
}  // namespace tpx

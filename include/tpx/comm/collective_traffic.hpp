// collective_traffic: what a rank's collectives on one communicator have moved, per operation:
// how many calls, the bytes of the data they were about, and the bytes a ring algorithm puts on
// this rank's link for them.
//
// Every communicator counts it (any_communicator.hpp, beside the time it spends), so a run can
// say how much each mesh axis carried (rank_context::traffic_by_axis_names: by the axes' names,
// as the example trainers' log and --dry-run report it), and a dry run (spmd/dry_run.hpp), whose communicators move
// nothing, says what a real run of the same program would move. The two byte counts follow
// nccl-tests' conventions (its doc/PERFORMANCE.md): the data size of an all_gather is the
// gathered result, of a reduce_scatter its input, of an all_reduce, all_to_all or broadcast the
// buffer; the link bytes are that size times the bus factor of a ring of n ranks: (n - 1) / n for
// all_gather, reduce_scatter and all_to_all, 2 (n - 1) / n for all_reduce, 1 for broadcast; so a
// group of one rank puts nothing on a link. For shards that differ in size (extents that do not
// divide) the link bytes are the ring's average, as nccl-tests' are.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tpx/comm/collective_descriptor.hpp"

namespace tpx {

struct traffic_count {
  std::int64_t calls = 0;
  double data_bytes = 0;  // the sizes of the collectives' data
  double link_bytes = 0;  // what a ring puts on this rank's link for them

  traffic_count& operator+=(const traffic_count& other) {
    calls += other.calls;
    data_bytes += other.data_bytes;
    link_bytes += other.link_bytes;
    return *this;
  }
  traffic_count& operator-=(const traffic_count& other) {
    calls -= other.calls;
    data_bytes -= other.data_bytes;
    link_bytes -= other.link_bytes;
    return *this;
  }
  friend bool operator==(const traffic_count&, const traffic_count&) = default;
};

class collective_traffic {
 public:
  // The operations counted, in the order reports list them.
  static constexpr std::array<detail::CollectiveOp, 6> operations = {
      detail::CollectiveOp::all_gather, detail::CollectiveOp::reduce_scatter,
      detail::CollectiveOp::all_reduce, detail::CollectiveOp::all_to_all,
      detail::CollectiveOp::broadcast,  detail::CollectiveOp::barrier};

  // One call of `op` on a group of `ranks` over `data_bytes` of data (0 for a barrier).
  void add(detail::CollectiveOp op, int ranks, double data_bytes) {
    traffic_count& c = of(op);
    ++c.calls;
    c.data_bytes += data_bytes;
    c.link_bytes += data_bytes * bus_factor(op, ranks);
  }

  traffic_count& of(detail::CollectiveOp op) { return counts_[static_cast<std::size_t>(op)]; }
  const traffic_count& of(detail::CollectiveOp op) const {
    return counts_[static_cast<std::size_t>(op)];
  }
  traffic_count total() const {
    traffic_count t;
    for (detail::CollectiveOp op : operations) t += of(op);
    return t;
  }

  collective_traffic& operator+=(const collective_traffic& other) {
    for (detail::CollectiveOp op : operations) of(op) += other.of(op);
    return *this;
  }
  // What was moved since `earlier`, a copy taken before.
  collective_traffic& operator-=(const collective_traffic& earlier) {
    for (detail::CollectiveOp op : operations) of(op) -= earlier.of(op);
    return *this;
  }
  friend bool operator==(const collective_traffic&, const collective_traffic&) = default;

  // nccl-tests' bus factor for `op` on a ring of `ranks`.
  static constexpr double bus_factor(detail::CollectiveOp op, int ranks) {
    if (ranks <= 1) return 0;
    const double share = static_cast<double>(ranks - 1) / ranks;
    switch (op) {
      case detail::CollectiveOp::all_reduce:
        return 2 * share;
      case detail::CollectiveOp::broadcast:
        return 1;
      case detail::CollectiveOp::all_gather:
      case detail::CollectiveOp::reduce_scatter:
      case detail::CollectiveOp::all_to_all:
        return share;
      default:
        return 0;
    }
  }

 private:
  // Indexed by CollectiveOp; send and recv are not collectives of a group and stay 0.
  std::array<traffic_count, 8> counts_{};
};

// What a rank's collectives moved over one set of mesh axes, named as reports name it: "X",
// "X, Y" (rank_context::traffic_by_axis_names).
struct axes_traffic {
  std::string axes;
  collective_traffic traffic;
  friend bool operator==(const axes_traffic&, const axes_traffic&) = default;
};

// What was moved between two lists taken from the same rank, `earlier` first.
inline std::vector<axes_traffic> traffic_since(std::vector<axes_traffic> now,
                                               const std::vector<axes_traffic>& earlier) {
  for (std::size_t i = 0; i < now.size() && i < earlier.size(); ++i)
    now[i].traffic -= earlier[i].traffic;
  return now;
}

// The same for two lists indexed by sets of axes (rank_context::traffic_by_axes).
inline std::vector<collective_traffic> traffic_since(
    std::vector<collective_traffic> now, const std::vector<collective_traffic>& earlier) {
  for (std::size_t i = 0; i < now.size() && i < earlier.size(); ++i) now[i] -= earlier[i];
  return now;
}

// What a list of them put on the rank's link, over every set of axes.
inline double link_bytes(const std::vector<axes_traffic>& traffic) {
  double bytes = 0;
  for (const axes_traffic& axes : traffic) bytes += axes.traffic.total().link_bytes;
  return bytes;
}
inline double link_bytes(const std::vector<collective_traffic>& traffic) {
  double bytes = 0;
  for (const collective_traffic& axes : traffic) bytes += axes.total().link_bytes;
  return bytes;
}

}  // namespace tpx

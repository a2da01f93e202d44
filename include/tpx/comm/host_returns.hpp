// HostReturns: which ranks of a HostWorld have returned, promising to call no more collectives.
//
// A collective that some rank skips is the classic distributed hang: `if (rank.world_rank() ==
// 0) tpx::to_global(a);` leaves rank 0 waiting for peers that have gone on, and, once they have
// returned from the SPMD function, can never come. The launcher records each rank that returns
// through HostWorld::finish; from then on a collective of one of its groups that it never joined
// fails at once, naming it, instead of waiting for the timeout (host_group.hpp). A rank's flag
// goes from false to true once and is one atomic load to read, cheap enough for the wait loop
// of every collective.
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

namespace tpx::detail {

class HostReturns {
 public:
  explicit HostReturns(int world_size) : returned_(static_cast<std::size_t>(world_size)) {}

  void record(int world_rank) { returned_[world_rank].store(true, std::memory_order_release); }

  bool returned(int world_rank) const {
    return returned_[world_rank].load(std::memory_order_acquire);
  }

 private:
  std::vector<std::atomic<bool>> returned_;  // [world rank]
};

}  // namespace tpx::detail

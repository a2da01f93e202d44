// exchange_watcher: what a rank that waits for its group's signature exchange tells a watcher of
// the whole job, so that ranks waiting in each other's collectives (rank 0 in a collective over Y
// that rank 1 would join once rank 0 joins its collective over X: a cycle across groups) fail
// within seconds, with the picture of who waits where, instead of each at its timeout.
//
// A checked exchange (comm/call_record.hpp) completes only when every rank of the group has
// posted it; no single group can tell that its missing member waits in another group's exchange.
// A watcher that hears every rank's waits can: once every rank waits in an exchange some member
// of its group has not posted, or has returned, it throws comm_error with the picture
// (comm/wait_picture.hpp). MpiWatchdog (comm/mpi_watchdog.hpp) hears the ranks' waits at world
// rank 0 over MPI; the MPI backend's own communicators use it directly, and the NCCL
// communicator, whose exchanges go over NCCL, reports to it through this interface when its
// processes were started by mpirun (spmd(tpx::cuda_mpi, ...), cuda/nccl_mpi_launch.hpp).
// InProcessWatchdog (comm/in_process_watchdog.hpp) hears them on a board in memory when the
// ranks are threads of one process (spmd(tpx::cuda_devices, ...)); TcpWatchdog
// (comm/tcp_watchdog.hpp) at world rank 0 over the TCP rendezvous's connections, kept open, when
// torchrun or srun started the processes without MPI (cuda/nccl_launch.hpp). The two that report
// to world rank 0 share the protocol of comm/heartbeat_watchdog.hpp.
//
// The protocol, per exchange: posted(group, n) when the rank posts exchange #n of the group;
// then, until the exchange completes, waiting(where, time waited so far) at every poll (it costs
// nothing until the rank has waited a while, a second or a tenth of one, and may throw the
// verdict); done_waiting() once it completes. Group 0 in `where` means the rank has returned
// from its SPMD function and waits for its groups' last exchanges.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "tpx/comm/call_record.hpp"

namespace tpx::detail {

// Where a rank waits: exchange #sequence of the group of id `group` (the mesh's axis-set mask),
// for `call`; group 0: it has returned and waits for its last exchanges.
struct exchange_wait {
  unsigned group = 0;
  std::uint64_t sequence = 0;
  CallRecord call;
};

class exchange_watcher {
 public:
  virtual ~exchange_watcher() = default;
  // This rank has posted exchange #sequence on group `group`.
  virtual void posted(unsigned group, std::uint64_t sequence) = 0;
  // This rank still waits as `where` says, for `waited` so far; throws comm_error when the job's
  // ranks can no longer meet (see the top of the file).
  virtual void waiting(const exchange_wait& where, std::chrono::steady_clock::duration waited) = 0;
  // The wait has ended: this rank runs again.
  virtual void done_waiting() = 0;
  // What the watcher knows of the other ranks, for a timeout's message (may be empty).
  virtual std::string last_heard() const = 0;
};

}  // namespace tpx::detail

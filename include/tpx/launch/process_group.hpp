// process_group: the processes of one launch as code outside the SPMD program sees them, for the
// few decisions one process must take for all of them before the ranks start: which process
// holds a checkpoint folder's lock, which run id every rank file records, which checkpoint a
// resumed run continues from (examples/trainer/training.hpp).
//
//   auto processes = processes_of(launcher);   // found by argument-dependent lookup
//   std::string answer = tpx::first_process_decides(processes, [&] { return decide(); });
//
// A process group names this process's place (rank(), size()) and broadcasts bytes from its
// first process (broadcast_from_first). Every launcher whose ranks are threads of this one
// process (tpx::host here; the CUDA launchers beside their own) has tpx::this_process_only, a
// group of one; tpx::mpi has the processes of MPI_COMM_WORLD (launch/mpi_processes.hpp), and
// tpx::cuda_launched, started by torchrun or srun, those of its TCP rendezvous
// (launch/tcp_processes.hpp). A launcher with no processes_of has no way for its processes to
// agree outside the SPMD program, and code that needs one can say so rather than let every
// process decide alone.
//
// first_process_decides runs the decision on the first process only and hands its answer to every
// process; if the decision throws, every process throws with its message (the first its own
// exception, the others a std::runtime_error), so that a process that cannot go on never leaves
// the others waiting for it.
#pragma once

#include <concepts>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "tpx/spmd/spmd.hpp"

namespace tpx {

template <class P>
concept ProcessGroup = requires(const P& processes, std::string text) {
  { processes.rank() } -> std::same_as<int>;
  { processes.size() } -> std::same_as<int>;
  { processes.broadcast_from_first(std::move(text)) } -> std::same_as<std::string>;
};

// The group of this process alone: what every launcher running its ranks as threads has.
struct this_process_only {
  int rank() const { return 0; }
  int size() const { return 1; }
  std::string broadcast_from_first(std::string text) const { return text; }
};

inline this_process_only processes_of(const host_backend&) { return {}; }

// The first process's decide() (returning a std::string), on every process (see the top).
template <ProcessGroup Processes, class Decide>
std::string first_process_decides(const Processes& processes, Decide&& decide) {
  // The first byte says which it is: '=' a decision, '!' the message of a failure.
  if (processes.rank() != 0) {
    const std::string answer = processes.broadcast_from_first({});
    if (answer.starts_with('!')) throw std::runtime_error(answer.substr(1));
    return answer.substr(1);
  }
  // Appended, not `"=" + decide()`: that trips GCC 12's -Wrestrict false positive at -O3.
  std::string answer = "=";
  try {
    answer += std::forward<Decide>(decide)();
  } catch (const std::exception& e) {
    std::string failure = "!";
    failure += e.what();
    processes.broadcast_from_first(failure);
    throw;
  } catch (...) {
    processes.broadcast_from_first("!tpx: the first process failed with a non-standard exception");
    throw;
  }
  processes.broadcast_from_first(answer);
  return answer.substr(1);
}

}  // namespace tpx

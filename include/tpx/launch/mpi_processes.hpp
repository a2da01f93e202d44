// mpi_processes: the process group (launch/process_group.hpp) of a job started by mpirun: the
// processes of MPI_COMM_WORLD, in its rank order, broadcasting with MPI_Bcast. It is what
// processes_of(tpx::mpi) gives, so that code run before spmd(tpx::mpi, ...) (the trainers'
// checkpoint folder) can let world rank 0 decide for every process. spmd/spmd_mpi.hpp includes
// it: code that sees tpx::mpi always sees its processes_of, which is found by argument-dependent
// lookup, so that no translation unit can take the launcher for one without a process group.
// shared_claim_among compares what each process holds alone (its GPU: launch/exclusive_claims.hpp),
// gathered on every process, for the MPI launch of the CUDA backend (cuda/nccl_mpi_launch.hpp).
//
// MPI is initialized here if the program has not (comm/mpi_environment.hpp). A failing MPI call
// throws comm_error naming the call, the rank and its host; MPI_Bcast has no timeout, so the
// first process must reach its broadcast (first_process_decides makes sure it does, with an
// answer or with its error).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tpx/comm/mpi_environment.hpp"
#include "tpx/comm/mpi_errors.hpp"
#include "tpx/launch/exclusive_claims.hpp"
#include "tpx/launch/process_group.hpp"

namespace tpx {

namespace detail {
// Every process's text (at most a few hundred bytes each), in world-rank order.
inline std::vector<std::string> gather_texts(const std::string& mine, const std::string& where) {
  int processes = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  std::vector<int> lengths(static_cast<std::size_t>(processes)), offsets(lengths.size());
  const int length = static_cast<int>(mine.size());
  check_mpi(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD),
            "MPI_Allgather", where);
  int total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  check_mpi(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                           offsets.data(), MPI_CHAR, MPI_COMM_WORLD),
            "MPI_Allgatherv", where);
  std::vector<std::string> texts;
  for (std::size_t r = 0; r < lengths.size(); ++r)
    texts.push_back(
        all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
  return texts;
}
}  // namespace detail

struct mpi_backend;  // spmd/spmd_mpi.hpp, which includes this file

class mpi_world_processes {
 public:
  mpi_world_processes() {
    detail::ensure_mpi_initialized();
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }

  // World rank 0's text, on every process (collective: every process calls it).
  std::string broadcast_from_first(std::string text) const {
    std::uint64_t length = text.size();
    check(MPI_Bcast(&length, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    text.resize(length);
    for (std::uint64_t at = 0; at < length;) {  // MPI counts are ints
      const int count = static_cast<int>(std::min<std::uint64_t>(length - at, 1u << 30));
      check(MPI_Bcast(text.data() + at, count, MPI_CHAR, 0, MPI_COMM_WORLD));
      at += static_cast<std::uint64_t>(count);
    }
    return text;
  }

 private:
  void check(int code) const {
    detail::check_mpi(code, "MPI_Bcast",
                      "a decision of world rank 0 sent to every process, on world rank " +
                          std::to_string(rank_) + " on host " + detail::mpi_host_name());
  }

  int rank_ = 0;
  int size_ = 1;
};

inline mpi_world_processes processes_of(const mpi_backend&) { return {}; }

// On every process: "" when no two processes of the job claim one thing, else the sentence naming
// the first two that do (shared_claim_problem), the same on every process. Collective.
inline std::string shared_claim_among(const mpi_world_processes& processes,
                                      const exclusive_claim& claim) {
  const std::string where = "the GPU claims' exchange on world rank " +
                            std::to_string(processes.rank());
  const std::vector<std::string> keys = detail::gather_texts(claim.key, where);
  const std::vector<std::string> holders = detail::gather_texts(claim.holder, where);
  std::vector<exclusive_claim> claims;
  for (std::size_t r = 0; r < keys.size(); ++r) claims.push_back({keys[r], holders[r]});
  return shared_claim_problem(claims);
}

}  // namespace tpx

// mpi_processes: the process group (launch/process_group.hpp) of a job started by mpirun: the
// processes of MPI_COMM_WORLD, in its rank order, broadcasting with MPI_Bcast. It is what
// processes_of(tpx::mpi) gives, so that code run before spmd(tpx::mpi, ...) (the trainers'
// checkpoint folder) can let world rank 0 decide for every process. spmd/spmd_mpi.hpp includes
// it: code that sees tpx::mpi always sees its processes_of, which is found by argument-dependent
// lookup, so that no translation unit can take the launcher for one without a process group.
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

#include "tpx/comm/mpi_environment.hpp"
#include "tpx/comm/mpi_errors.hpp"
#include "tpx/launch/process_group.hpp"

namespace tpx {

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

}  // namespace tpx

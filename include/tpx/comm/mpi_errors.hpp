// How MPI failures reach tpx's users: as comm_error naming the MPI call, the collective, the
// group, the rank and its host.
//
// The MPI communicators and the MPI launcher set MPI_ERRORS_RETURN on every communicator they
// use, so that a failing call returns a code instead of aborting the job with MPI's own terse
// message; check_mpi turns a code other than MPI_SUCCESS into a comm_error that says what a
// cluster user needs to find the culprit:
//   "tpx: MPI_Allgatherv failed in all_gather<float> of 12 elements on group {0,2} (mesh axis X),
//    rank 1 (world 2) on host node3: MPI_ERR_TRUNCATE: message truncated".
// Many MPI failures (a peer's death, most network errors) still end the job inside MPI, whatever
// the handler: MPI-3 does not promise that a job survives them.
#pragma once

#include <mpi.h>

#include <string>
#include <string_view>

#include "tpx/comm/communicator.hpp"

namespace tpx::detail {

// The text an MPI query writes into a buffer of `room` characters, giving its length
// (query(buffer, &length)), or `otherwise` when the query fails.
template <int room, class Query>
std::string mpi_text(Query query, std::string otherwise) {
  char text[room];
  int length = 0;
  if (query(text, &length) != MPI_SUCCESS) return otherwise;
  return std::string(text, static_cast<std::size_t>(length));
}

// This process's host, as MPI names it (MPI_Get_processor_name).
inline std::string mpi_host_name() {
  return mpi_text<MPI_MAX_PROCESSOR_NAME>(MPI_Get_processor_name, "an unknown host");
}

// MPI's words for an error code.
inline std::string mpi_error_text(int code) {
  return mpi_text<MPI_MAX_ERROR_STRING>(
      [code](char* text, int* length) { return MPI_Error_string(code, text, length); },
      "MPI error " + std::to_string(code));
}

// Throws comm_error "tpx: <call> failed in <what>: <MPI's words>" unless code is MPI_SUCCESS;
// `what` names the collective and who ran it, where.
inline void check_mpi(int code, std::string_view call, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  throw comm_error("tpx: " + std::string(call) + " failed in " + what + ": " +
                   mpi_error_text(code));
}

}  // namespace tpx::detail

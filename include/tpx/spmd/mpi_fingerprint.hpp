// The MPI launcher's first exchange: every process learns every process's host, and checks that
// all run the same build on the same mesh before any group is formed.
//
// Each process contributes its host (MPI_Get_processor_name) and its fingerprint: the fields of
// launch/build_fingerprint.hpp (mesh, compiler, language level, build options, type sizes) and
// the MPI library it loaded (the first line of MPI_Get_library_version: nodes with different MPI
// installs), one line each, gathered with MPI_Allgather (lengths) and MPI_Allgatherv (text):
// gather_texts, launch/mpi_processes.hpp.
// When any process's fingerprint differs from world rank 0's, every process throws spmd_error
// with the same message, naming each differing rank (the first 8), its host, and the first field
// that differs with both values:
//   "tpx: the processes of this job were not built or started alike, so none runs the SPMD
//    function: world rank 1 (host node1) has mesh X=4, Y=1 where world rank 0 (host node0) has
//    mesh X=2, Y=2; ... Start one program, built once, with the same mesh on every process."
// Otherwise it returns the hosts, which the error messages of the collectives use.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "tpx/comm/mpi_errors.hpp"
#include "tpx/launch/build_fingerprint.hpp"
#include "tpx/launch/mpi_processes.hpp"
#include "tpx/spmd/spmd.hpp"

namespace tpx::detail {

// The first line of the MPI library's own version string ("Open MPI v4.1.4, package: ...").
inline std::string mpi_library_version() {
  std::string version =
      mpi_text<MPI_MAX_LIBRARY_VERSION_STRING>(MPI_Get_library_version, "unknown");
  version = version.substr(0, version.find('\n'));
  while (!version.empty() && (version.back() == ' ' || version.back() == '\r')) version.pop_back();
  return version;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t begin = 0;
  for (std::size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1)
    lines.push_back(text.substr(begin, end - begin));
  lines.push_back(text.substr(begin));
  return lines;
}

// Every world rank's host, once all fingerprints equal world rank 0's; else spmd_error on every
// process (see the top of the file). `mesh` is Mesh::to_string(), `rank` this process's world
// rank.
inline std::vector<std::string> hosts_of_an_alike_job(const std::string& mesh, int rank) {
  std::vector<fingerprint_field> fields = build_fingerprint(mesh);
  fields.push_back({"MPI library", mpi_library_version()});
  std::string mine = mpi_host_name();  // the first line; the fields follow, one a line
  for (const fingerprint_field& field : fields) mine += '\n' + fingerprint_text({field});
  const std::vector<std::string> texts =
      gather_texts(mine, "the fingerprint exchange on world rank " + std::to_string(rank));
  std::vector<std::string> hosts;
  std::vector<std::vector<std::string>> lines;
  for (const std::string& text : texts) {
    lines.push_back(lines_of(text));
    hosts.push_back(lines.back()[0]);
  }
  std::string differences;
  int differing = 0;
  for (std::size_t r = 1; r < lines.size(); ++r) {
    const std::vector<std::string>& ours = lines[0];
    const std::vector<std::string>& theirs = lines[r];
    std::size_t field = 1;
    while (field < ours.size() && field < theirs.size() && ours[field] == theirs[field]) ++field;
    if (field == ours.size() && field == theirs.size()) continue;
    if (++differing > 8) continue;
    const auto at = [&](const std::vector<std::string>& of) {
      return field < of.size() ? of[field] : std::string("no more fields");
    };
    differences += (differing > 1 ? "; world rank " : "world rank ") + std::to_string(r) +
                   " (host " + hosts[r] + ") has " + at(theirs) + " where world rank 0 (host " +
                   hosts[0] + ") has " + at(ours);
  }
  if (differing == 0) return hosts;
  if (differing > 8) differences += "; and " + std::to_string(differing - 8) + " more ranks";
  throw spmd_error(rank,
                   "tpx: the processes of this job were not built or started alike, so none "
                   "runs the SPMD function: " +
                       differences +
                       ". Start one program, built once, with the same mesh on every process.");
}

}  // namespace tpx::detail

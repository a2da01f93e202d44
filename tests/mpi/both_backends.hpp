// on_both_backends: runs one SPMD function on the MPI backend and on the thread backend with the
// same mesh, and hands back what this process's rank recorded on each, to be compared bit for bit.
//
// Under mpirun every process first runs fn as its own rank of spmd(tpx::mpi, mesh, ...), then runs
// the whole mesh again as threads of itself, spmd(tpx::host, mesh, ...), keeping what the thread
// of its own world rank recorded. The thread backend is the reference: its collectives are tested
// against naive loops (tests/unit/host_communicator_test.cpp) and its typed ops against
// unsharded references (tests/property). Both backends fold reductions in group-rank order in
// fp32 (comm/rank_fold.hpp), so every recorded value must be equal bit for bit: no tolerance.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <tpx/spmd/spmd_mpi.hpp>
#include <tpx/tpx.hpp>
#include <utility>
#include <vector>

namespace mpi_tests {

// Named results of one rank, as raw bytes.
class record {
 public:
  template <class T>
  void add(std::string name, std::span<const T> values) {
    std::vector<unsigned char> bytes(values.size_bytes());
    if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
    entries_.emplace_back(std::move(name), std::move(bytes));
  }
  // Notes a failed check; kept, not asserted, as doctest's assertions on the thread backend's
  // rank threads would race.
  void expect(bool ok, const std::string& what) {
    if (!ok) failures_.push_back(what);
  }
  const std::vector<std::pair<std::string, std::vector<unsigned char>>>& entries() const {
    return entries_;
  }
  const std::vector<std::string>& failures() const { return failures_; }

 private:
  std::vector<std::pair<std::string, std::vector<unsigned char>>> entries_;
  std::vector<std::string> failures_;
};

// fn(rank, record&) on both backends; returns {MPI's record, the thread backend's record} of this
// process's world rank.
template <class MeshT, class Fn>
std::pair<record, record> on_both_backends(const MeshT& mesh, Fn fn) {
  record mpi, host;
  int me = -1;
  tpx::spmd(tpx::mpi, mesh, [&](auto& rank) {
    me = rank.world_rank();
    fn(rank, mpi);
  });
  tpx::spmd(tpx::host, mesh, [&](auto& rank) {
    record mine;
    fn(rank, mine);
    if (rank.world_rank() == me) host = std::move(mine);
  });
  return {std::move(mpi), std::move(host)};
}

// Checks that neither record noted a failure and both hold the same entries with the same bytes.
inline void check_same_bits(const record& mpi, const record& host, const std::string& context) {
  for (const std::string& f : mpi.failures()) FAIL_CHECK(context << ", MPI: " << f);
  for (const std::string& f : host.failures()) FAIL_CHECK(context << ", threads: " << f);
  REQUIRE(mpi.entries().size() == host.entries().size());
  for (std::size_t i = 0; i < mpi.entries().size(); ++i) {
    INFO(context << ": " << mpi.entries()[i].first);
    CHECK(mpi.entries()[i].first == host.entries()[i].first);
    CHECK(mpi.entries()[i].second == host.entries()[i].second);
  }
}

}  // namespace mpi_tests

// Processes of one job that were given different meshes of the same size are refused before any
// collective, on every process, with a message naming each differing rank, its host and the
// field that differs (issue 10, requirement 6; spmd/mpi_fingerprint.hpp). CTest starts this with
// `mpirun -np 4`: the even world ranks call spmd(tpx::mpi, ...) with a 2x2 mesh, the odd ones with
// 4x1 (4 ranks too, so the world-size check passes and only the fingerprint can tell). Each
// process checks that spmd throws spmd_error carrying its own rank and the whole message, never
// runs the function, and does so within 2 s. And two processes claiming one GPU
// (launch/exclusive_claims.hpp, as cuda_mpi's launch claims them) are named by the same sentence
// on every process; processes with GPUs of their own pass.
#include <doctest/doctest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <tpx/spmd/spmd_mpi.hpp>
#include <tpx/tpx.hpp>

namespace {
TPX_MESH_AXES(X, Y);

std::string on_host(int world_rank) {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return "world rank " + std::to_string(world_rank) + " (host " + name + ")";
}
}  // namespace

TEST_CASE("processes given different meshes are refused on every rank, naming the field") {
  tpx::detail::ensure_mpi_initialized();
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  const tpx::Mesh<X, Y> mesh = me % 2 == 0 ? tpx::Mesh<X, Y>{2, 2} : tpx::Mesh<X, Y>{4, 1};
  bool ran = false;
  std::string what;
  int thrown_by = -1;
  const auto start = std::chrono::steady_clock::now();
  try {
    tpx::spmd(tpx::mpi, mesh, [&](auto&) { ran = true; });
  } catch (const tpx::spmd_error& e) {
    what = e.what();
    thrown_by = e.rank();
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  INFO(what);
  CHECK_FALSE(ran);
  CHECK(thrown_by == me);
  CHECK(took.count() < 2.0);
  const std::string expected =
      "tpx: the processes of this job were not built or started alike, so none runs the SPMD "
      "function: " +
      on_host(1) + " has mesh X=4, Y=1 where " + on_host(0) + " has mesh X=2, Y=2; " +
      on_host(3) + " has mesh X=4, Y=1 where " + on_host(0) +
      " has mesh X=2, Y=2. Start one program, built once, with the same mesh on every process.";
  CHECK(what == expected);
}

TEST_CASE("shared_claim_among names, on every process, the first two processes claiming one GPU") {
  const tpx::mpi_world_processes processes;
  const int me = processes.rank();
  const auto claim_of = [](int rank, int gpus) -> tpx::exclusive_claim {
    return {"GPU GPU-" + std::to_string(rank % gpus), "process " + std::to_string(rank)};
  };
  CHECK(tpx::shared_claim_among(processes, claim_of(me, processes.size())).empty());
  CHECK(tpx::shared_claim_among(processes, {}).empty());
  // Four processes, two GPUs: 0 and 2 share GPU-0 (1 and 3 GPU-1, found after).
  REQUIRE(processes.size() == 4);
  CHECK(tpx::shared_claim_among(processes, claim_of(me, 2)) ==
        "rank 0 (process 0) and rank 2 (process 2) both claim GPU GPU-0; each rank needs one of "
        "its own");
}

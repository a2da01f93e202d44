// A job whose size differs from the mesh's fails on every process with a message naming both and
// the host, instead of hanging or running a wrong mesh: CTest starts this with `mpirun -np 3`
// for a 2x2 mesh, and each process checks that spmd(tpx::mpi, ...) throws spmd_error saying so
// (and never runs the function).
#include <doctest/doctest.h>

#include <string>
#include <tpx/spmd/spmd_mpi.hpp>
#include <tpx/tpx.hpp>

namespace {
TPX_MESH_AXES(X, Y);
}

TEST_CASE("a world of another size than the mesh is refused on every rank, naming both") {
  bool ran = false;
  std::string what;
  try {
    tpx::spmd(tpx::mpi, tpx::Mesh<X, Y>{2, 2}, [&](auto&) { ran = true; });
  } catch (const tpx::spmd_error& e) {
    what = e.what();
  }
  INFO(what);
  CHECK_FALSE(ran);
  CHECK(what.find("tpx: the mesh (X=2, Y=2) has 4 ranks but MPI started 3 processes") == 0);
  CHECK(what.find(" on host ") != std::string::npos);
  CHECK(what.find("mpirun -np 4") != std::string::npos);
}

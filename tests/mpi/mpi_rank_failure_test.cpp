// A rank that throws ends the whole MPI job instead of leaving its peers waiting in a collective:
// under `mpirun -np 4`, rank 2 of a 2x2 mesh throws while the others enter an all-reduce it will
// never join. CTest passes the test when the output holds the launcher's report, "tpx: rank 2
// (X=1, Y=0) on host <host> failed: <what>", which only comes with MPI_Abort ending every
// process (a hang would instead hit CTest's timeout).
#include <stdexcept>
#include <tpx/spmd/spmd_mpi.hpp>
#include <tpx/tpx.hpp>
#include <vector>

namespace {
TPX_MESH_AXES(X, Y);
}

int main() {
  tpx::spmd(tpx::mpi, tpx::Mesh<X, Y>{2, 2}, [](auto& rank) {
    if (rank.world_rank() == 2) throw std::runtime_error("injected failure");
    std::vector<float> v(8, 1.0f);
    rank.template group<X, Y>().all_reduce(std::span<const float>(v), std::span<float>(v));
  });
  return 0;
}

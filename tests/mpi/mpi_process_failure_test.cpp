// A process of an MPI job that fails outside the SPMD program, before its rank starts, while the
// others wait for it inside theirs (issue 12: the checkpoint folder not visible from its node,
// say): the trainers' MPI main (examples/trainer/process_main.hpp, as_mpi_process) must end the
// job within its grace period (10 s) rather than leave the others waiting for their collective
// timeout, set here to 5 minutes. Under `mpirun -np 4`, process 1 returns 1 at once; CTest
// passes the test on the line as_mpi_process prints before MPI_Abort, within its TIMEOUT of 60 s
// (a job that waited for the collective timeout would hit it).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <span>
#include <tpx/spmd/spmd_mpi.hpp>
#include <tpx/tpx.hpp>
#include <vector>

#include "../../examples/trainer/process_main.hpp"

namespace {
TPX_MESH_AXES(X, Y);
}

int main(int argc, char** argv) {
  return trainer::as_mpi_process(argc, argv, [](int) {
    int process = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &process);
    if (process == 1) {
      std::fprintf(stderr, "process 1: injected failure before its rank started\n");
      return 1;
    }
    tpx::spmd_options options;
    options.timeout = std::chrono::minutes(5);
    tpx::spmd(
        tpx::mpi, tpx::Mesh<X, Y>{2, 2},
        [](auto& rank) {
          std::vector<float> v(8, 1.0f);
          rank.template group<X, Y>().all_reduce(std::span<const float>(v), std::span<float>(v));
        },
        options);
    return 0;
  });
}

// Issue 12's fault injection under mpirun: the example trainer on a mesh given as two arguments
// (2x2 by default; CTest also runs 4x1), one process per rank, where a rank picked from a fixed
// seed throws as its forward pass of a picked step begins (tests/trainer/fault_injection.hpp),
// while the others wait for it inside their forward passes. The MPI launcher must print
// "tpx: rank R (X=.., Y=..) on host H failed: injected fault at step S" and MPI_Abort the job;
// CTest passes the test on that line (a hang would hit the test's TIMEOUT instead, and the job
// ending any other way lacks the line). The thread backend's twin is
// tests/trainer/fault_injection_test.cpp.
#include <cstdlib>
#include <random>
#include <tpx/spmd/spmd_mpi.hpp>

#include "../trainer/fault_injection.hpp"

int main(int argc, char** argv) {
  const int x = argc > 2 ? std::atoi(argv[1]) : 2, y = argc > 2 ? std::atoi(argv[2]) : 2;
  std::mt19937 pick(20261124 + x);
  const int rank = static_cast<int>(pick() % static_cast<unsigned>(x * y));
  trainer_test::injected_fault = {rank, static_cast<int>(pick() % 8)};
  trainer::run(
      trainer_test::faulty_run(x, y, 10), [](const trainer::step_report&) {}, tpx::mpi);
  return 0;  // not reached: the injected fault aborts the job
}

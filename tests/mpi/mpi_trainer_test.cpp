// The example trainers under mpirun -np 4 (issue 10): the MLP trainer (examples/trainer) on
// meshes 2x2, 4x1 and 1x4, cut into pipeline stages (tpx-train --pipeline) on P x X x Y of 2x2x1
// (1F1B), 2x1x2 (zero-bubble V) and 4x1x1 (GPipe), and the GPT example on 2x2 and, with two
// replicas (HSDP), on 2x1x2, each rank a process, follow the thread backend's losses bit for bit
// over 30 steps (20 for the pipelines).
//
// Every process runs trainer::run with tpx::mpi; only the process of world rank 0 receives the
// reports. It then trains the same run again as threads of itself (tpx::host), the reference:
// both backends fold every reduction in group-rank order in fp32 (comm/rank_fold.hpp) and give
// each rank one BLAS thread here, so no tolerance is needed. The other processes check that they
// received no report.
#include <doctest/doctest.h>
#include <mpi.h>

#include <tpx/spmd/spmd_mpi.hpp>
#include <vector>

#include "../trainer/gpt_test_support.hpp"
#include "../trainer/trainer_test_support.hpp"
#include "mpi_trainer_runs.hpp"

namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

template <class Family, class Launcher>
std::vector<float> losses_on(const trainer::run_options<Family>& o, Launcher launcher) {
  std::vector<float> out;
  trainer::run(
      o, [&](const trainer::step_report& r) { out.push_back(r.loss); }, launcher);
  return out;
}

template <class Family>
void check_against_threads(const trainer::run_options<Family>& o) {
  CAPTURE(o.mesh_r);
  CAPTURE(o.mesh_x);
  CAPTURE(o.mesh_y);
  const std::vector<float> mpi = losses_on(o, tpx::mpi);
  if (world_rank() != 0) {
    CHECK(mpi.empty());
    return;
  }
  REQUIRE(mpi.size() == static_cast<std::size_t>(o.steps));
  CHECK(mpi == losses_on(o, tpx::host));
  CHECK(mpi.back() < mpi.front());  // it learns
}

}  // namespace

TEST_CASE("the MLP trainer under mpirun follows the thread backend bit for bit") {
  for (const auto& [x, y] : {std::pair{2, 2}, std::pair{4, 1}, std::pair{1, 4}}) {
    trainer::options o = trainer_test::small(x, y);
    o.steps = 30;
    check_against_threads(o);
  }
}

TEST_CASE(
    "the MLP trainer cut into pipeline stages under mpirun follows the thread backend bit "
    "for bit") {
  struct layout {
    int stages, x, y;
    const char* schedule;
  };
  for (const layout l :
       {layout{2, 2, 1, "1f1b"}, layout{2, 1, 2, "zero-bubble-v"}, layout{4, 1, 1, "gpipe"}}) {
    CAPTURE(l.stages);
    CAPTURE(l.schedule);
    check_against_threads(trainer_test::pipelined(l.stages, l.x, l.y, l.schedule));
  }
}

TEST_CASE("the GPT trainer under mpirun follows the thread backend bit for bit") {
  check_against_threads(gpt_test::training(1, 2, 2));
  check_against_threads(gpt_test::training(2, 1, 2));  // HSDP: replicas over R
}

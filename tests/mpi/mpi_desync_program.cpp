// The SPMD programs that mpi_desync_test runs under `mpirun -np 4`, one per scenario (argv[1]),
// on a 2x2 mesh (world ranks 0..3; groups of axis Y {0,1} and {2,3}, of X {0,2} and {1,3}, of
// both {0,1,2,3}) with spmd_options::timeout of argv[2] ms. Every scenario first meets in a
// barrier of all four ranks (collective #1 of the group of X and Y), after which rank 0 prints
// "ranks met", the moment the test times the failure from. Then the ranks' control flow diverges
// as each scenario says, the way a bug in a user's program would:
//   skip         rank 1 skips an all_reduce the others call, and all then call an all_gather
//   add          rank 2 calls a barrier the others do not before an all_reduce
//   differ       rank 3 passes other per-rank counts to an all_gather than the others
//   return_early rank 3 returns after 300 ms while the others wait in an all_reduce
//   cycle        rank 0 calls an all_reduce over Y then one over X and Y, the others the other way
//                round: rank 0 waits for rank 1 in Y, ranks 1-3 wait for rank 0 in X and Y
//   stuck        rank 1 sleeps 30 s (a rank stuck outside any collective) while the others wait
//   late_return  a correct program whose ranks arrive 1.5 s apart, in a collective and at the
//                return: it must finish cleanly (exit status 0) and print "all returned"
//   watched_cycle the cycle again, through the exchange_watcher interface that the NCCL
//                communicator reports its checked exchanges to under mpirun
//                (comm/exchange_watcher.hpp): no tpx collective runs, each exchange is an
//                MPI_Ibarrier on its group, polled, every poll told to the MPI backend's
//                heartbeat as NcclCommunicator::await_exchange tells it
//   watched_late the same stand-in exchanges in a correct order, ranks arriving 1.5 s apart:
//                it must finish cleanly and print "all returned"
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <tpx/comm/exchange_watcher.hpp>
#include <tpx/spmd/spmd_mpi.hpp>
#include <tpx/tpx.hpp>
#include <vector>

namespace {
TPX_MESH_AXES(X, Y);

template <class Group>
void all_reduce_8(Group& group) {
  std::vector<float> v(8, 1.0f);
  group.all_reduce(std::span<const float>(v), std::span<float>(v));
}

template <class Group>
void all_gather_4_each(Group& group, std::vector<std::size_t> counts) {
  std::vector<float> in(counts[static_cast<std::size_t>(group.rank())], 1.0f), out(16);
  group.all_gather(std::span<const float>(in), std::span<float>(out),
                   std::span<const std::size_t>(counts));
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// The watched scenarios (see the top): the world's and Y's groups of the 2x2 mesh, each
// exchange an MPI_Ibarrier reported to the heartbeat, with the calls' records as the NCCL
// communicator would post them (all_reduce<float> of 8 elements).
void watched(const std::string& scenario, std::chrono::milliseconds timeout) {
  const tpx::Mesh<X, Y> mesh{2, 2};
  tpx::detail::ensure_mpi_initialized();
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  tpx::detail::MpiWatchdog watchdog(tpx::detail::hosts_of_an_alike_job(mesh.to_string(), me),
                                    timeout, tpx::detail::mesh_group_layout(mesh));
  constexpr unsigned y = 2, xy = 3;  // the groups' ids: their axis sets' masks (X: bit 0)
  MPI_Comm groups[4] = {MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL};
  for (const unsigned mask : {y, xy})
    MPI_Comm_split(MPI_COMM_WORLD, tpx::detail::coords_off_axes(mesh, me, mask), me, &groups[mask]);
  std::uint64_t sequence[4] = {};
  const tpx::detail::CallRecord call = tpx::detail::record_of(
      tpx::detail::collective_call<float>(tpx::detail::CollectiveOp::all_reduce, 8, {}));
  const auto exchange = [&](unsigned mask) {
    const tpx::detail::exchange_wait where{mask, ++sequence[mask], call};
    watchdog.posted(mask, where.sequence);
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Ibarrier(groups[mask], &request);
    const auto start = std::chrono::steady_clock::now();
    for (int done = 0; MPI_Test(&request, &done, MPI_STATUS_IGNORE), !done;) {
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > timeout) throw std::runtime_error("a stand-in exchange timed out");
      watchdog.waiting(where, waited);
      std::this_thread::yield();
    }
    watchdog.done_waiting();
  };
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) {
    std::printf("ranks met\n");
    std::fflush(stdout);
  }
  try {
    if (scenario == "watched_cycle") {
      if (me == 0) exchange(y);
      exchange(xy);
      if (me != 0) exchange(y);
    } else {
      if (me == 3) sleep_ms(1500);
      exchange(xy);
      if (me == 2) sleep_ms(1500);
      exchange(y);
    }
    watchdog.finish();
  } catch (const std::exception& e) {
    tpx::detail::abort_mpi_job("tpx: " + tpx::detail::rank_label(mesh, me) +
                               " failed: " + e.what());
  }
  for (const unsigned mask : {y, xy}) MPI_Comm_free(&groups[mask]);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: mpi_desync_program <scenario> <timeout ms>\n");
    return 2;
  }
  const std::string scenario = argv[1];
  tpx::spmd_options options;
  options.timeout = std::chrono::milliseconds(std::atoi(argv[2]));
  if (scenario.starts_with("watched_")) {
    watched(scenario, options.timeout);
    std::printf("all returned\n");
    std::fflush(stdout);
    return 0;
  }
  tpx::spmd(
      tpx::mpi, tpx::Mesh<X, Y>{2, 2},
      [&](auto& rank) {
        auto& all = rank.template group<X, Y>();
        all.barrier();
        const int me = rank.world_rank();
        if (me == 0) {
          std::printf("ranks met\n");
          std::fflush(stdout);
        }
        if (scenario == "skip") {
          if (me != 1) all_reduce_8(all);
          all_gather_4_each(all, {4, 4, 4, 4});
        } else if (scenario == "add") {
          if (me == 2) all.barrier();
          all_reduce_8(all);
        } else if (scenario == "differ") {
          all_gather_4_each(all, me == 3 ? std::vector<std::size_t>{3, 5, 4, 4}
                                         : std::vector<std::size_t>{4, 4, 4, 4});
        } else if (scenario == "return_early") {
          if (me == 3) {
            sleep_ms(300);
            return;
          }
          all_reduce_8(all);
        } else if (scenario == "cycle") {
          if (me == 0) all_reduce_8(rank.template group<Y>());
          all_reduce_8(all);
          if (me != 0) all_reduce_8(rank.template group<Y>());
        } else if (scenario == "stuck") {
          if (me == 1) sleep_ms(30000);
          all_reduce_8(all);
        } else if (scenario == "late_return") {
          if (me == 3) sleep_ms(1500);
          all_reduce_8(all);
          if (me == 2) sleep_ms(1500);
        } else {
          throw std::invalid_argument("no scenario " + scenario);
        }
      },
      options);
  if (scenario == "late_return") {
    std::printf("all returned\n");
    std::fflush(stdout);
  }
  return 0;
}

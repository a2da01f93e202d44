// The MPI communicator (comm/mpi_communicator.hpp) against the thread backend's, run under
// `mpirun -np 4`: every collective (barrier, all_gather, reduce_scatter, all_reduce as a sum and
// as a maximum with NaN and -inf among the inputs, all_to_all, broadcast from every root), in fp32
// and bf16, on the groups of every set of mesh axes (X, Y, both) of the meshes 4x1, 2x2 and 1x4,
// with uneven counts, empty shards and blocks longer than the fold's tiles. Each process compares
// its rank's results with those of the same rank on the thread backend, bit for bit (see
// both_backends.hpp: the two fold reductions in the same order), and asserts on its own; mpirun
// fails when any process does. Last, buffers that disagree with the counts throw on each rank,
// before MPI is called, naming the collective, the group, the rank and its host.
#include <doctest/doctest.h>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/collective_values.hpp"
#include "both_backends.hpp"

namespace {

TPX_MESH_AXES(X, Y);

using namespace collective_values;
using Counts = std::vector<std::size_t>;
using tpx::bf16;

// Per-rank counts of a group of n: pattern 0 and 1 uneven with empty shards, 2 longer than a tile.
Counts counts_of(int n, int pattern) {
  Counts counts(static_cast<std::size_t>(n));
  for (int s = 0; s < n; ++s)
    counts[s] = pattern == 2 ? 700 + 37 * static_cast<std::size_t>(s)
                             : static_cast<std::size_t>(s * 2 + pattern) % 3;
  return counts;
}

std::size_t total(const Counts& counts) {
  std::size_t sum = 0;
  for (std::size_t c : counts) sum += c;
  return sum;
}

// Every collective of CommunicatorFor<_, T> on group g, recorded under `where`.
template <class T>
void run_collectives(tpx::any_communicator& g, int world_rank, const std::string& where,
                     mpi_tests::record& rec) {
  const int n = g.size();
  const std::string type = tpx::detail::element_name<T>.data();
  g.barrier();
  for (int pattern = 0; pattern < 3; ++pattern) {
    const std::string tag =
        where + " " + type + " counts pattern " + std::to_string(pattern) + ": ";
    const Counts counts = counts_of(n, pattern);

    const std::vector<T> shard = values<T>(world_rank, counts[g.rank()], pattern);
    std::vector<T> gathered(total(counts));
    g.all_gather(std::span<const T>(shard), std::span<T>(gathered), counts);
    rec.add(tag + "all_gather", std::span<const T>(gathered));

    const std::vector<T> full = values<T>(world_rank, total(counts), pattern + 10);
    std::vector<T> scattered(counts[g.rank()]);
    g.reduce_scatter(std::span<const T>(full), std::span<T>(scattered), counts);
    rec.add(tag + "reduce_scatter", std::span<const T>(scattered));

    std::vector<T> summed(full.size());
    g.all_reduce(std::span<const T>(full), std::span<T>(summed));
    rec.add(tag + "all_reduce(sum)", std::span<const T>(summed));

    std::vector<T> maxed = values_with_specials<T>(world_rank, full.size());
    g.all_reduce(std::span<const T>(maxed), std::span<T>(maxed), tpx::reduction::max);  // in place
    rec.add(tag + "all_reduce(max)", std::span<const T>(maxed));

    Counts matrix(static_cast<std::size_t>(n * n));
    for (int from = 0; from < n; ++from)
      for (int to = 0; to < n; ++to)
        matrix[from * n + to] = pattern == 2
                                    ? 600 + static_cast<std::size_t>(from + to)
                                    : static_cast<std::size_t>(from * 3 + to + pattern) % 4;
    std::size_t sent = 0, received = 0;
    for (int s = 0; s < n; ++s) {
      sent += matrix[g.rank() * n + s];
      received += matrix[s * n + g.rank()];
    }
    const std::vector<T> outgoing = values<T>(world_rank, sent, pattern + 30);
    std::vector<T> incoming(received);
    g.all_to_all(std::span<const T>(outgoing), std::span<T>(incoming), matrix);
    rec.add(tag + "all_to_all", std::span<const T>(incoming));

    for (int root = 0; root < n; ++root) {
      const std::vector<T> sent_by_root = values<T>(world_rank, counts[root] + 3, pattern + 40);
      std::vector<T> got(sent_by_root.size());
      g.broadcast(std::span<const T>(sent_by_root), std::span<T>(got), root);
      rec.add(tag + "broadcast from " + std::to_string(root), std::span<const T>(got));
    }
  }
}

template <class T, class R>
void run_on_every_axis_set(R& rank, mpi_tests::record& rec) {
  run_collectives<T>(rank.template group<X>(), rank.world_rank(), "axis X", rec);
  run_collectives<T>(rank.template group<Y>(), rank.world_rank(), "axis Y", rec);
  run_collectives<T>(rank.template group<X, Y>(), rank.world_rank(), "axes X, Y", rec);
}

}  // namespace

TEST_CASE("every collective on MPI equals the thread backend's, bit for bit") {
  for (auto [x, y] : {std::pair{4, 1}, std::pair{2, 2}, std::pair{1, 4}}) {
    const tpx::Mesh<X, Y> mesh{x, y};
    const auto [mpi, host] = mpi_tests::on_both_backends(mesh, [](auto& rank, auto& rec) {
      run_on_every_axis_set<float>(rank, rec);
      run_on_every_axis_set<bf16>(rank, rec);
    });
    mpi_tests::check_same_bits(mpi, host, "mesh " + mesh.to_string());
  }
}

TEST_CASE("buffers that disagree with the counts throw, naming the collective, rank and host") {
  tpx::spmd(tpx::mpi, tpx::Mesh<X, Y>{2, 2}, [](auto& rank) {
    tpx::any_communicator& g = rank.template group<X>();
    const std::vector<float> in(2);
    std::vector<float> out(3);  // the counts say 4
    const Counts counts{2, 2};
    std::string what;
    try {
      g.all_gather(std::span<const float>(in), std::span<float>(out), counts);
    } catch (const std::invalid_argument& e) {
      what = e.what();
    }
    INFO(what);
    CHECK(what.find("tpx: all_gather on group {") == 0);
    CHECK(what.find("(mesh axis X), rank ") != std::string::npos);
    CHECK(what.find(" on host ") != std::string::npos);
    CHECK(what.find("out.size() is 3, expected 4") != std::string::npos);
    g.barrier();  // the group still works
  });
}

// The typed ops on the MPI backend, run under `mpirun -np 4` on the meshes 4x1, 2x2 and 1x4:
// reshard from each of the 18 valid shardings of a tensor [I, J] (tests/support/sharding_cases.hpp)
// to three targets, and matmul of three pairs of sharded operands, with extents that divide the
// mesh and extents that leave some ranks an empty shard. Each process checks its rank's block
// of every result against the unsharded result computed locally by naive loops in double (within
// 1e-5 relative, as the property tests: partial sums are rounded once more than the original),
// and against the same rank's block on the thread backend, bit for bit (both_backends.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../support/sharding_cases.hpp"
#include "both_backends.hpp"

using namespace cases;

namespace {

struct extents {
  std::int64_t i, j, k;
};

// Records t, reduced over its unreduced axes, and checks it against want within 1e-5 * scale.
template <class Tn>
void record_reduced(const Tn& t, const std::vector<double>& want, const std::vector<double>& scale,
                    const std::string& name, mpi_tests::record& rec) {
  const auto reduced = tpx::reshard<tpx::tensor_with_t<Tn, typename Tn::dims, Unreduced<>>>(t);
  rec.expect(block_matches(reduced, want, scale, 1e-5), name + " differs from the loops");
  rec.add(name, std::span<const float>(reduced.local().data(), reduced.local().size()));
}

template <class Source, class... Targets, class R>
void reshard_to_each(tpx::type_list<Targets...>, R& rank, extents e, mpi_tests::record& rec) {
  using S = typename Source::tensor;
  const S source = make_operand<S>(rank, e.i, e.j, 3);
  std::vector<double> want(e.i * e.j), scale(want.size());
  for (std::int64_t g = 0; g < e.i * e.j; ++g) {
    want[g] = value_at(3, g);
    scale[g] = std::abs(want[g]) + 1e-6;
  }
  (record_reduced(
       tpx::reshard<Targets>(source), want, scale,
       std::string("reshard ") + S::notation.c_str() + " -> " + Targets::notation.c_str(), rec),
   ...);
}

template <class... Sources, class R>
void reshard_every_source(tpx::type_list<Sources...>, R& rank, extents e, mpi_tests::record& rec) {
  using targets = tpx::type_list<tpx::Tensor<float, I<X>, J<Y>>, tpx::Tensor<float, I<Y, X>, J<>>,
                                 tpx::Tensor<float, I<>, J<>>>;
  (reshard_to_each<Sources>(targets{}, rank, e, rec), ...);
}

template <class A, class B, class R>
void matmul_against_loops(R& rank, extents e, mpi_tests::record& rec) {
  const auto a = make_operand<A>(rank, e.i, e.j, 1);
  const auto b = make_operand<B>(rank, e.j, e.k, 2);
  std::vector<double> want(e.i * e.k), scale(want.size());
  for (std::int64_t i = 0; i < e.i; ++i)
    for (std::int64_t k = 0; k < e.k; ++k)
      for (std::int64_t j = 0; j < e.j; ++j) {
        const double x = double(value_at(1, i * e.j + j)) * double(value_at(2, j * e.k + k));
        want[i * e.k + k] += x;
        scale[i * e.k + k] += std::abs(x);
      }
  record_reduced(tpx::matmul(a, b), want, scale,
                 std::string("matmul ") + A::notation.c_str() + " * " + B::notation.c_str(), rec);
}

}  // namespace

TEST_CASE("reshard and matmul on MPI equal the unsharded result and the thread backend's") {
  for (auto [x, y] : {std::pair{4, 1}, std::pair{2, 2}, std::pair{1, 4}}) {
    for (const extents e : {extents{8, 8, 8}, extents{3, 5, 6}}) {
      const tpx::Mesh<X, Y> mesh{x, y};
      const auto [mpi, host] = mpi_tests::on_both_backends(mesh, [e](auto& rank, auto& rec) {
        reshard_every_source(valid_cases<I, J>{}, rank, e, rec);
        matmul_against_loops<tpx::Tensor<float, I<X>, J<Y>>, tpx::Tensor<float, J<X>, K<Y>>>(
            rank, e, rec);
        matmul_against_loops<tpx::Tensor<float, I<X>, J<>>, tpx::Tensor<float, J<>, K<Y>>>(rank, e,
                                                                                           rec);
        matmul_against_loops<tpx::Tensor<float, I<>, J<X, Y>>, tpx::Tensor<float, J<X, Y>, K<>>>(
            rank, e, rec);
      });
      mpi_tests::check_same_bits(mpi, host,
                                 "mesh " + mesh.to_string() + ", extents " + std::to_string(e.i) +
                                     "x" + std::to_string(e.j) + "x" + std::to_string(e.k));
    }
  }
}

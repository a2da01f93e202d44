// Property: for every pair of shardings of A[I, J] and B[J, K] on a mesh with axes X and Y
// (each dim unsplit, on X, on Y, on X then Y, or on Y then X; each operand optionally unreduced),
// on meshes 2x2 and 2x3, with extents that divide the mesh and extents that do not:
//  - tpx accepts the pair at compile time exactly when the test's own rule says it is legal
//    (an operand unreduced over an axis may not meet an operand that uses that axis), and
//  - the sharded product, reduced, equals the unsharded product computed by a naive loop in
//    double, per element within 1e-5 of sum_j |a_ij b_jk| (fp32 accumulation).
// The pairs are split over TPX_PROPERTY_PART (0..parts-1) so the translation units compile in
// parallel; each part takes every parts-th left operand.
#include "../support/sharding_cases.hpp"

using namespace cases;

namespace {

constexpr int part = TPX_PROPERTY_PART;
constexpr int parts = TPX_PROPERTY_PARTS;

template <class CaseA, class CaseB>
constexpr bool legal = (CaseA::cand::unreduced_mask & CaseB::cand::uses) == 0 &&
                       (CaseB::cand::unreduced_mask & CaseA::cand::uses) == 0;

template <class CaseA, class CaseB, class R>
void check_pair(const R& rank, std::int64_t ni, std::int64_t nj, std::int64_t nk, tally& t) {
  using TA = typename CaseA::tensor;
  using TB = typename CaseB::tensor;
  static_assert(tpx::can_contract_v<TA, TB, J<>> == legal<CaseA, CaseB>);
  if constexpr (legal<CaseA, CaseB>) {
    const auto a = make_operand<TA>(rank, ni, nj, 1);
    const auto b = make_operand<TB>(rank, nj, nk, 2);
    const auto c = tpx::matmul(a, b);
    using C = std::remove_cvref_t<decltype(c)>;
    const auto reduced = tpx::reshard<tpx::tensor_with_t<C, typename C::dims, Unreduced<>>>(c);
    std::vector<double> want(ni * nk), scale(ni * nk);
    for (std::int64_t i = 0; i < ni; ++i)
      for (std::int64_t k = 0; k < nk; ++k)
        for (std::int64_t j = 0; j < nj; ++j) {
          const double x = double(value_at(1, i * nj + j)) * double(value_at(2, j * nk + k));
          want[i * nk + k] += x;
          scale[i * nk + k] += std::abs(x);
        }
    if (!block_matches(reduced, want, scale, 1e-5))
      t.fail(std::string(TA::notation.c_str()) + " * " + TB::notation.c_str() + " (" +
             tpx::matmul_plan_t<TA, TB>::description.c_str() + ") on rank " +
             std::to_string(rank.world_rank()) + " of mesh " + rank.mesh_string() + ", extents " +
             std::to_string(ni) + "x" + std::to_string(nj) + "x" + std::to_string(nk));
    if (rank.world_rank() == 0) ++t.checked;
  }
}

template <class CaseA, class... Bs, class R>
void check_row(type_list<Bs...>, const R& rank, std::int64_t ni, std::int64_t nj, std::int64_t nk,
               tally& t) {
  (check_pair<CaseA, Bs>(rank, ni, nj, nk, t), ...);
}

template <class Lhs, class Rhs, class R, std::size_t... Row>
void check_all(std::index_sequence<Row...>, const R& rank, std::int64_t ni, std::int64_t nj,
               std::int64_t nk, tally& t) {
  (
      [&] {
        if constexpr (Row % parts == part)
          check_row<tpx::type_at_t<Row, Lhs>>(Rhs{}, rank, ni, nj, nk, t);
      }(),
      ...);
}

}  // namespace

TEST_CASE("sharded matmul equals the unsharded product for every pair of shardings") {
  using lhs_cases = valid_cases<I, J>;
  using rhs_cases = valid_cases<J, K>;
  static_assert(lhs_cases::size == 18 && rhs_cases::size == 18);
  tally t;
  for (auto [x, y] : {std::pair{2, 2}, std::pair{2, 3}})
    for (auto [ni, nj, nk] : {std::tuple{12, 12, 12}, std::tuple{7, 5, 3}})
      // init-captures: clang before 16 cannot capture structured bindings
      tpx::spmd(tpx::host, tpx::Mesh<X, Y>{x, y}, [&, ni = ni, nj = nj, nk = nk](auto& rank) {
        check_all<lhs_cases, rhs_cases>(std::make_index_sequence<lhs_cases::size>{}, rank, ni, nj,
                                        nk, t);
      });
  for (const std::string& f : t.failures) FAIL_CHECK(f);
  CHECK(t.failures.empty());
  CHECK(t.checked > 0);
  MESSAGE("part " << part << "/" << parts << ": " << t.checked.load()
                  << " legal (sharding pair, mesh, extents) cases checked numerically");
}

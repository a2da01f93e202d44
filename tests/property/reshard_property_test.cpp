// Property: for every pair (source, target) of shardings of a tensor [I, J] on a mesh with axes
// X and Y (the 18 valid shardings of tests/support/sharding_cases.hpp, so 324 pairs), on meshes
// 2x2 and 2x3, with divisible and non-divisible extents:
//  - reshard returns exactly the type asked for, whether the target is named by its tensor type
//    or by its sharding arguments, with Unreduced's axes in either order (static_asserts), and
//  - reshard compiles exactly when the test's own rule says it can (a target may stay unreduced
//    only over axes the source is unreduced over: tpx reduces partial sums, it does not invent
//    them), and
//  - every rank's block of the result, reduced where the target is still unreduced, equals the
//    global tensor (within 1e-5 relative: partial sums are rounded once more than the original).
#include "../support/sharding_cases.hpp"

using namespace cases;

namespace {

constexpr int part = TPX_PROPERTY_PART;
constexpr int parts = TPX_PROPERTY_PARTS;

// reshard<Args...>(t) with the sharding arguments of the tensor type Target, Unreduced's axes
// passed through Order (written order, or reversed).
template <class Unred, class Seq = std::make_index_sequence<Unred::axes::size>>
struct reversed_unreduced_of;
template <class... Axes, std::size_t... I>
struct reversed_unreduced_of<tpx::unreduced_over<Axes...>, std::index_sequence<I...>> {
  using type = Unreduced<tpx::type_at_t<sizeof...(Axes) - 1 - I, type_list<Axes...>>...>;
};
struct written_unreduced {
  template <class U>
  using apply = U;
};
struct reversed_unreduced {
  template <class U>
  using apply = typename reversed_unreduced_of<U>::type;
};
template <class Target, class Order = written_unreduced, class Source>
auto reshard_by_arguments(const Source& s) {
  return [&]<class... Dims>(type_list<Dims...>) {
    using U = typename Target::unreduced;
    if constexpr (std::is_same_v<U, Unreduced<>>)
      return tpx::reshard<Dims...>(s);
    else
      return tpx::reshard<Dims..., typename Order::template apply<U>>(s);
  }(typename Target::dims{});
}

template <class From, class To, class R>
void check_pair(const R& rank, std::int64_t rows, std::int64_t cols, tally& t) {
  using S = typename From::tensor;
  using T = typename To::tensor;
  constexpr bool legal = (To::cand::unreduced_mask & ~From::cand::unreduced_mask) == 0;
  static_assert(tpx::reshard_traits<S, T>::possible == legal);
  if constexpr (legal) {
    static_assert(std::is_same_v<decltype(tpx::reshard<T>(std::declval<const S&>())), T>,
                  "reshard<Target> returns exactly Target");
    static_assert(std::is_same_v<decltype(reshard_by_arguments<T>(std::declval<const S&>())), T>,
                  "reshard<Dims..., Unreduced<...>> returns the tensor type of those arguments");
    static_assert(std::is_same_v<decltype(reshard_by_arguments<T, reversed_unreduced>(
                                     std::declval<const S&>())),
                                 T>,
                  "Unreduced's axes in another order name the same target");
    const S source = make_operand<S>(rank, rows, cols, 3);
    const T target = tpx::reshard<T>(source);
    const auto reduced = tpx::reshard<tpx::tensor_with_t<T, typename T::dims, Unreduced<>>>(target);
    std::vector<double> want(rows * cols), scale(rows * cols);
    for (std::int64_t i = 0; i < rows * cols; ++i) {
      want[i] = value_at(3, i);
      scale[i] = std::abs(want[i]) + 1e-6;
    }
    if (!block_matches(reduced, want, scale, 1e-5))
      t.fail(std::string(S::notation.c_str()) + " -> " + T::notation.c_str() + " (" +
             tpx::reshard_traits<S, T>::description.c_str() + ") on rank " +
             std::to_string(rank.world_rank()) + " of mesh " + rank.mesh_string() + ", extents " +
             std::to_string(rows) + "x" + std::to_string(cols));
    if (rank.world_rank() == 0) ++t.checked;
  }
}

template <class From, class... Tos, class R>
void check_row(type_list<Tos...>, const R& rank, std::int64_t rows, std::int64_t cols, tally& t) {
  (check_pair<From, Tos>(rank, rows, cols, t), ...);
}

template <class Cases, class R, std::size_t... Row>
void check_all(std::index_sequence<Row...>, const R& rank, std::int64_t rows, std::int64_t cols,
               tally& t) {
  (
      [&] {
        if constexpr (Row % parts == part)
          check_row<tpx::type_at_t<Row, Cases>>(Cases{}, rank, rows, cols, t);
      }(),
      ...);
}

}  // namespace

TEST_CASE("reshard between any two shardings keeps every element") {
  using all = valid_cases<I, J>;
  tally t;
  for (auto [x, y] : {std::pair{2, 2}, std::pair{2, 3}})
    for (auto [rows, cols] : {std::pair{12, 12}, std::pair{7, 5}})
      // init-captures: clang before 16 cannot capture structured bindings
      tpx::spmd(tpx::host, tpx::Mesh<X, Y>{x, y}, [&, rows = rows, cols = cols](auto& rank) {
        check_all<all>(std::make_index_sequence<all::size>{}, rank, rows, cols, t);
      });
  for (const std::string& f : t.failures) FAIL_CHECK(f);
  CHECK(t.failures.empty());
  CHECK(t.checked > 0);
  MESSAGE("part " << part << "/" << parts << ": " << t.checked.load()
                  << " legal (source, target, mesh, extents) cases checked numerically");
}

// The small conveniences of a tensor (issue 13, items 4, 5 and 7): a + b, a - b, a * s, s * a
// and tpx::sub against naive loops over the global tensors; describe / operator<< and at() by
// global coordinates against the block each rank holds; one target spelling for matmul and
// reshard; a target over an axis the mesh lacks named at run time before any collective (the
// rank-first forms, which reject it at compile time: tests/compile_fail); rename moving a block
// under new dim names; permute reordering dims against the naive index mapping; the space of a
// rank read through a reference (static_asserts at the end).
// Meshes 1x1 and 2x2, with extents that divide and that do not.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tpx/tpx.hpp>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

TPX_MESH_AXES(X, Y, Z);
TPX_DIMS(B, D, I, J, K);

using tpx::Tensor;
using tpx::Unreduced;

// Both target spellings name one type.
template <class Tn>
const Tn& any();
using L = Tensor<float, I<X>, J<>>;
using R = Tensor<float, J<>, K<X>>;
static_assert(std::is_same_v<decltype(tpx::matmul<I<X>, K<>>(any<L>(), any<R>())),
                             decltype(tpx::matmul<Tensor<float, I<X>, K<>>>(any<L>(), any<R>()))>);
static_assert(std::is_same_v<decltype(tpx::matmul<I<X>, K<>>(any<L>(), any<R>())),
                             Tensor<float, I<X>, K<>>>);
static_assert(std::is_same_v<decltype(tpx::reshard<I<>, J<X>>(any<L>())),
                             decltype(tpx::reshard<Tensor<float, I<>, J<X>>>(any<L>()))>);

// The rank-first forms, which check the target's axes against the mesh at compile time, return
// what the tensor-only forms return.
using Rank2 = tpx::Rank<tpx::Mesh<X, Y>>;
static_assert(std::is_same_v<decltype(tpx::reshard<I<>, J<X>>(any<Rank2>(), any<L>())),
                             decltype(tpx::reshard<I<>, J<X>>(any<L>()))>);
static_assert(std::is_same_v<decltype(tpx::matmul<I<X>, K<>>(any<Rank2>(), any<L>(), any<R>())),
                             decltype(tpx::matmul<I<X>, K<>>(any<L>(), any<R>()))>);
static_assert(std::is_same_v<decltype(tpx::matmul(any<Rank2>(), any<L>(), any<R>())),
                             decltype(tpx::matmul(any<L>(), any<R>()))>);
static_assert(std::is_same_v<decltype(tpx::slice<Y, J>(any<Rank2>(), any<L>())),
                             decltype(tpx::slice<Y, J>(any<L>()))>);

// The operators exist for tensors only, and keep the operand's type.
static_assert(std::is_same_v<decltype(any<L>() + any<L>()), L>);
static_assert(std::is_same_v<decltype(any<L>() - any<L>()), L>);
static_assert(std::is_same_v<decltype(any<L>() * 2.0f), L>);
static_assert(std::is_same_v<decltype(3 * any<L>()), L>);
template <class A, class B2>
concept multipliable = requires(const A& a, const B2& b) { a * b; };
template <class A, class B2>
concept addable = requires(const A& a, const B2& b) { a + b; };
static_assert(!multipliable<L, L>);  // no elementwise * of tensors (it would read as matmul)
static_assert(!addable<L, float>);
static_assert(addable<L, L> && multipliable<L, float> && multipliable<double, L>);

void check_mesh(int mx, int my, std::int64_t nb, std::int64_t nd) {
  CAPTURE(mx);
  CAPTURE(my);
  CAPTURE(nb);
  CAPTURE(nd);
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
    auto a = tpx::randn<float, B<X>, D<Y>>(rank, {B(nb), D(nd)}, 1);
    auto b = tpx::randn<float, B<X>, D<Y>>(rank, {B(nb), D(nd)}, 2);
    const std::vector<float> ga = tpx::to_global(a), gb = tpx::to_global(b);

    const auto sum = a + b;
    const auto diff = a - b;
    const auto sub = tpx::sub(a, b);
    const auto right = a * 0.5f;
    const auto left = 2 * a;
    const std::vector<float> gsum = tpx::to_global(sum), gdiff = tpx::to_global(diff),
                             gsub = tpx::to_global(sub), gright = tpx::to_global(right),
                             gleft = tpx::to_global(left);
    for (std::size_t i = 0; i < ga.size(); ++i) {
      CHECK(gsum[i] == ga[i] + gb[i]);
      CHECK(gdiff[i] == ga[i] - gb[i]);
      CHECK(gsub[i] == ga[i] - gb[i]);
      CHECK(gright[i] == 0.5f * ga[i]);
      CHECK(gleft[i] == 2.0f * ga[i]);
    }

    // at(): exactly this rank's block, with the global tensor's values.
    std::size_t held = 0;
    for (std::int64_t i = 0; i < nb; ++i)
      for (std::int64_t j = 0; j < nd; ++j) {
        const std::optional<float> v = tpx::at(a, {i, j});
        const bool mine = i >= a.local_offset(0) && i < a.local_offset(0) + a.local_extent(0) &&
                          j >= a.local_offset(1) && j < a.local_offset(1) + a.local_extent(1);
        CHECK(v.has_value() == mine);
        if (v) {
          CHECK(*v == ga[static_cast<std::size_t>(i * nd + j)]);
          ++held;
        }
      }
    CHECK(held == a.size());
    CHECK_THROWS_AS(tpx::at(a, {nb, 0}), std::out_of_range);

    // describe and operator<<: the notation, the global shape and this rank's block.
    const std::string text = tpx::describe(a);
    std::ostringstream printed;
    printed << a;
    CHECK(printed.str() == text);
    CHECK(text.find("[B_X, D_Y] float: global (B=" + std::to_string(nb) +
                    ", D=" + std::to_string(nd) + ")") == 0);
    const std::string block =
        "rank " + std::to_string(rank.world_rank()) + " holds B[" +
        std::to_string(a.local_offset(0)) + ":" +
        std::to_string(a.local_offset(0) + a.local_extent(0)) + "], D[" +
        std::to_string(a.local_offset(1)) + ":" +
        std::to_string(a.local_offset(1) + a.local_extent(1)) + "]";
    CHECK(text.find(block) != std::string::npos);
    CHECK(text.find(std::to_string(a.size()) + " elements)") != std::string::npos);
    if (a.size() > 0) {
      std::ostringstream first;
      first << ": " << a.local()[0];
      CHECK(text.find(first.str()) != std::string::npos);
    }

    // Partial sums add and subtract too (linear), and stay partial.
    auto w = tpx::randn<float, D<Y>, K<>>(rank, {D(nd), K(3)}, 3);
    auto p = tpx::matmul(a, w);  // [B_X, K]{U_Y}
    static_assert(std::is_same_v<decltype(p - p), Tensor<float, B<X>, K<>, Unreduced<Y>>>);
    const std::vector<float> zero = tpx::to_global(p - p);
    for (float z : zero) CHECK(z == 0.0f);

    // Both target spellings of matmul give the same values.
    const std::vector<float> g1 = tpx::to_global(tpx::matmul<B<>, K<>>(a, w));
    const std::vector<float> g2 = tpx::to_global(tpx::matmul<Tensor<float, B<>, K<>>>(a, w));
    CHECK(g1 == g2);
  });
}

TEST_CASE("operators, sub, at and describe on a 1x1 mesh") {
  check_mesh(1, 1, 4, 6);
  check_mesh(1, 1, 3, 5);
}

TEST_CASE("operators, sub, at and describe on a 2x2 mesh") {
  check_mesh(2, 2, 4, 6);
  check_mesh(2, 2, 3, 5);  // blocks of unequal size
  check_mesh(2, 2, 1, 3);  // an empty block
}

TEST_CASE("a target over an axis the mesh lacks is named before any collective") {
  std::string what;
  try {
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [](auto& rank) {
      auto a = tpx::randn<float, I<>, J<>>(rank, {I(4), J(2)}, 1);
      (void)tpx::reshard<I<Z>, J<>>(a);
    });
  } catch (const std::exception& e) {
    what = e.what();
  }
  INFO(what);
  CHECK(what.find("reshard to [I_Z, J]: mesh axis Z is not an axis of the mesh (X=2, Y=1)") !=
        std::string::npos);

  what.clear();
  try {
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 2}, [](auto& rank) {
      auto a = tpx::randn<float, I<>, J<Y>>(rank, {I(4), J(2)}, 1);
      auto b = tpx::randn<float, J<Y>, K<>>(rank, {J(2), K(3)}, 2);
      (void)tpx::matmul<I<Z>, K<>>(a, b);
    });
  } catch (const std::exception& e) {
    what = e.what();
  }
  INFO(what);
  CHECK(what.find("matmul to [I_Z, K]: mesh axis Z is not an axis of the mesh (X=1, Y=2)") !=
        std::string::npos);
}

TEST_CASE("the rank-first forms compute what the tensor-only forms compute") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [](auto& rank) {
    auto a = tpx::randn<float, I<X>, J<>>(rank, {I(5), J(3)}, 1);
    auto b = tpx::randn<float, J<>, K<Y>>(rank, {J(3), K(4)}, 2);
    CHECK(tpx::to_global(tpx::reshard<I<>, J<Y>>(rank, a)) ==
          tpx::to_global(tpx::reshard<I<>, J<Y>>(a)));
    CHECK(tpx::to_global(tpx::matmul<I<>, K<X>>(rank, a, b)) ==
          tpx::to_global(tpx::matmul<I<>, K<X>>(a, b)));
    CHECK(tpx::to_global(tpx::matmul(rank, a, b)) == tpx::to_global(tpx::matmul(a, b)));
    CHECK(tpx::to_global(tpx::slice<Y, J>(rank, a)) == tpx::to_global(a));
  });
}

TEST_CASE("a rank-first form refuses a tensor of another rank") {
  // Two ranks of a 2x1 mesh, made by hand: no collective runs before the check.
  const tpx::Mesh<X, Y> mesh{2, 1};
  auto rank_at = [&](int x) {
    return tpx::Rank<tpx::Mesh<X, Y>>(
        mesh, x, {{&tpx::axis_key<X>, "X", 2, x}, {&tpx::axis_key<Y>, "Y", 1, 0}}, {});
  };
  const auto rank_0 = rank_at(0);
  const auto rank_1 = rank_at(1);
  const Tensor<float, I<X>, J<>> of_rank_0(rank_0, {I(4), J(2)});
  std::string what;
  try {
    (void)tpx::reshard<I<>, J<>>(rank_1, of_rank_0);
  } catch (const std::invalid_argument& e) {
    what = e.what();
  }
  CHECK(what == "tpx: reshard: tensor [I_X, J] belongs to rank 0, not to the rank passed, 1");
}

}  // namespace

TEST_CASE("permute stores the dims in another order, each keeping its split, with no communication") {
  for (const auto& [mx_, my_] : std::vector<std::pair<int, int>>{{1, 1}, {2, 2}, {3, 2}}) {
    const int mx = mx_, my = my_;  // clang before 16 cannot capture bindings in lambdas
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      const std::int64_t ni = 5, nj = 3, nk = 4;
      auto a = tpx::randn<float, I<X>, J<>, K<Y>>(rank, {I(ni), J(nj), K(nk)}, 9);
      const auto p = tpx::permute<K, I, J>(a);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(p)>,
                                   Tensor<float, K<Y>, I<X>, J<>>>);
      CHECK(p.local_extents() ==
            decltype(p.local_extents()){a.local_extent(2), a.local_extent(0), a.local_extent(1)});
      const std::vector<float> before = tpx::to_global(a), after = tpx::to_global(p);
      std::size_t wrong = 0;
      for (std::int64_t i = 0; i < ni; ++i)
        for (std::int64_t j = 0; j < nj; ++j)
          for (std::int64_t k = 0; k < nk; ++k)
            wrong += after[(k * ni + i) * nj + j] != before[(i * nj + j) * nk + k];
      CHECK(wrong == 0);
    });
  }
}

TEST_CASE("each rank's memory meter counts the bytes of its own tensors, and their peak") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{3, 1}, [&](auto& rank) {
    const std::int64_t before = rank.memory().live_bytes();
    std::int64_t held = 0;
    {
      const auto a = tpx::randn<float, I<X>, J<>>(rank, {I(7), J(5)}, 1);  // blocks of 3, 2, 2 rows
      held = static_cast<std::int64_t>(a.local_extent(0) * 5 * sizeof(float));
      CHECK(rank.memory().live_bytes() - before == held);
      const Tensor<float, I<X>, J<>> copy = a;
      CHECK(rank.memory().live_bytes() - before == 2 * held);
      const auto whole = tpx::reshard<I<>, J<>>(a);  // 7 x 5 on every rank
      CHECK(rank.memory().live_bytes() - before ==
            2 * held + static_cast<std::int64_t>(7 * 5 * sizeof(float)));
    }
    CHECK(rank.memory().live_bytes() == before);
    CHECK(rank.memory().peak_bytes() >= 2 * held + static_cast<std::int64_t>(7 * 5 * sizeof(float)));
    rank.memory().reset_peak();
    CHECK(rank.memory().peak_bytes() == before);
  });
}

TEST_CASE("rename relabels a dim in place: same elements, same splits, the buffer moved") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [](auto& rank) {
    auto a = tpx::randn<float, I<X>, J<>, K<Y>>(rank, {I(5), J(3), K(4)}, 7);
    const std::vector<float> before = tpx::to_global(a);
    const float* block = a.data();
    const auto offsets = a.local_offsets();
    auto b = tpx::rename<J, D>(std::move(a));
    static_assert(std::is_same_v<decltype(b), Tensor<float, I<X>, D<>, K<Y>>>);
    auto c = tpx::rename<I, B>(std::move(b));  // a split dim keeps its axes
    static_assert(std::is_same_v<decltype(c), Tensor<float, B<X>, D<>, K<Y>>>);
    CHECK(c.data() == block);
    CHECK(c.local_offsets() == offsets);
    CHECK(c.global_extent(0) == 5);
    CHECK(c.global_extent(1) == 3);
    CHECK(tpx::to_global(c) == before);
  });
}

// sum<D> adds a dim's elements on each rank and leaves the partial sums unreduced over D's
// axes; reduced, they equal a loop over the global tensor in double within 1e-5 of the sum of
// magnitudes (fp32 accumulation). Extents 5 x 3 leave uneven and empty blocks on the meshes.
void check_sum(int mx, int my) {
  CAPTURE(mx);
  CAPTURE(my);
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
    constexpr std::int64_t nb = 5, nd = 3;
    const auto a = tpx::randn<float, B<X>, D<Y>>(rank, {B(nb), D(nd)}, 4);
    const std::vector<float> g = tpx::to_global(a);
    // got against element(k) summed over k < count in double, within 1e-5 of the sum of their
    // magnitudes.
    const auto check_sum_of = [](float got, std::int64_t count, const auto& element) {
      double want = 0, scale = 0;
      for (std::int64_t k = 0; k < count; ++k) {
        want += element(k);
        scale += std::abs(element(k));
      }
      CHECK(std::abs(static_cast<double>(got) - want) <= 1e-5 * scale);
    };
    const auto at = [&](std::int64_t i, std::int64_t j) {
      return g[static_cast<std::size_t>(i * nd + j)];
    };

    auto over_b = tpx::sum<B>(a);
    static_assert(std::is_same_v<decltype(over_b), Tensor<float, D<Y>, Unreduced<X>>>);
    const std::vector<float> columns = tpx::to_global(tpx::all_reduce<X>(std::move(over_b)));
    REQUIRE(columns.size() == static_cast<std::size_t>(nd));
    for (std::int64_t j = 0; j < nd; ++j)
      check_sum_of(columns[static_cast<std::size_t>(j)], nb,
                   [&](std::int64_t i) { return at(i, j); });

    auto over_d = tpx::sum<D>(a);
    static_assert(std::is_same_v<decltype(over_d), Tensor<float, B<X>, Unreduced<Y>>>);
    const std::vector<float> rows = tpx::to_global(tpx::all_reduce<Y>(std::move(over_d)));
    REQUIRE(rows.size() == static_cast<std::size_t>(nb));
    for (std::int64_t i = 0; i < nb; ++i)
      check_sum_of(rows[static_cast<std::size_t>(i)], nd, [&](std::int64_t j) { return at(i, j); });

    // A vector split over both axes sums to a scalar owed an all-reduce over both.
    const auto v = tpx::randn<float, B<X, Y>>(rank, {B(nb)}, 5);
    const std::vector<float> gv = tpx::to_global(v);
    auto total = tpx::sum<B>(v);
    static_assert(std::is_same_v<decltype(total), Tensor<float, Unreduced<X, Y>>>);
    const std::vector<float> reduced =
        tpx::to_global(tpx::all_reduce<Y>(tpx::all_reduce<X>(std::move(total))));
    REQUIRE(reduced.size() == 1);
    check_sum_of(reduced[0], nb, [&](std::int64_t i) { return gv[static_cast<std::size_t>(i)]; });
  });
}

TEST_CASE("sum over one dim leaves a partial sum over the dim's axes") {
  check_sum(1, 1);
  check_sum(2, 2);
  check_sum(2, 3);
}

// Over an axis of one rank (Y of a 2x1 mesh) a collective given an rvalue moves its buffer into
// the result, with the elements the copy an lvalue gets holds; over X (two ranks) an rvalue is
// gathered or reduced as an lvalue is. Partial sums come from a matmul contracting a split dim.
TEST_CASE("a collective over an axis of one rank moves an rvalue's buffer and copies an lvalue") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [](auto& rank) {
    const auto t = tpx::randn<float, I<X>, J<>, K<Y>>(rank, {I(5), J(3), K(4)}, 11);
    const std::vector<float> whole = tpx::to_global(t);
    auto handed = t;
    const float* block = handed.data();
    const auto kept = tpx::all_gather<Y>(t);
    const auto moved = tpx::all_gather<Y>(std::move(handed));
    static_assert(std::is_same_v<decltype(moved), const Tensor<float, I<X>, J<>, K<>>>);
    CHECK(moved.data() == block);
    CHECK(kept.data() != t.data());
    CHECK(tpx::to_global(moved) == whole);
    CHECK(tpx::to_global(kept) == whole);
    // A step applied to an rvalue goes on as one, and over X it gathers.
    auto again = t;
    const float* again_block = again.data();
    const auto stepped = tpx::apply<tpx::AllGather<Y, K<>>>(std::move(again));
    CHECK(stepped.data() == again_block);
    // reshard hands an rvalue to its first step: over Y it moves, then over X it gathers.
    auto for_reshard = t;
    const float* reshard_block = for_reshard.data();
    const auto to_whole_k = tpx::reshard<I<X>, J<>, K<>>(std::move(for_reshard));
    CHECK(to_whole_k.data() == reshard_block);
    CHECK(tpx::reshard<I<X>, J<>, K<>>(t).data() != t.data());
    CHECK(tpx::to_global(tpx::reshard<I<>, J<>, K<>>(tpx::Tensor<float, I<X>, J<>, K<Y>>(t))) == whole);
    auto over_x = tpx::all_gather<X>(tpx::all_gather<Y>(tpx::Tensor<float, I<X>, J<>, K<Y>>(t)));
    static_assert(std::is_same_v<decltype(over_x), Tensor<float, I<>, J<>, K<>>>);
    CHECK(tpx::to_global(over_x) == whole);

    const auto a = tpx::randn<float, I<>, J<Y>>(rank, {I(6), J(5)}, 12);
    const auto b = tpx::randn<float, J<Y>, K<X>>(rank, {J(5), K(4)}, 13);
    const auto partial = tpx::matmul(a, b);  // [I, K_X]{U_Y}
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(partial)>, Tensor<float, I<>, K<X>, Unreduced<Y>>>);
    const auto moves = [&](auto collective) {
      auto copy = partial;
      const float* copy_block = copy.data();
      const auto from_lvalue = collective(partial);
      const auto from_rvalue = collective(std::move(copy));
      CHECK(from_rvalue.data() == copy_block);
      CHECK(from_lvalue.data() != partial.data());
      CHECK(tpx::to_global(from_rvalue) == tpx::to_global(from_lvalue));
    };
    moves([](auto&& p) { return tpx::all_reduce<Y>(std::forward<decltype(p)>(p)); });
    moves([](auto&& p) { return tpx::all_reduce_max<Y>(std::forward<decltype(p)>(p)); });
    moves([](auto&& p) { return tpx::reduce_scatter<Y, I>(std::forward<decltype(p)>(p)); });
    moves([](auto&& p) { return tpx::reduce_scatter<Y, I<>>(std::forward<decltype(p)>(p)); });
    moves([](auto&& p) { return tpx::reshard<I<>, K<X>>(std::forward<decltype(p)>(p)); });
    moves([&](auto&& p) { return tpx::reshard<I<>, K<X>>(rank, std::forward<decltype(p)>(p)); });

    // Over X, partial sums of two ranks: the rvalue's sum is the lvalue's.
    const auto c = tpx::randn<float, I<>, J<X>>(rank, {I(6), J(5)}, 14);
    const auto d = tpx::randn<float, J<X>, K<>>(rank, {J(5), K(4)}, 15);
    const auto over_two = tpx::matmul(c, d);  // [I, K]{U_X}
    auto over_two_copy = over_two;
    CHECK(tpx::to_global(tpx::all_reduce<X>(std::move(over_two_copy))) == tpx::to_global(tpx::all_reduce<X>(over_two)));
  });
}

// The space of a rank type that names one is the same read through a reference, as
// space_of_t<decltype(rank)> reads it for an `auto& rank`: not host memory by default, which on a
// CUDA rank would make host tensors that every device operation then misreads.
namespace {
struct rank_with_a_space {
  struct space : tpx::host_space {};
};
}  // namespace
static_assert(std::is_same_v<tpx::space_of_t<rank_with_a_space&>, rank_with_a_space::space>);
static_assert(std::is_same_v<tpx::space_of_t<const rank_with_a_space&>, rank_with_a_space::space>);
static_assert(std::is_same_v<tpx::space_of_t<rank_with_a_space>, rank_with_a_space::space>);
static_assert(std::is_same_v<tpx::space_of_t<tpx::rank_context&>, tpx::host_space>);

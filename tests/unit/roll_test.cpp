// roll<X, D>(t, k) (ops/roll.hpp) against numpy.roll written as a loop over the global tensor:
// on meshes 1x1 to 4x2, for shifts from -5 to 6 (negative, zero, past the axis's size), D
// outermost and innermost, D split over X alone and over Y then X (each Y-block rolling its own
// X-blocks), in fp32 and bf16 (bit-exact: blocks move, nothing is computed). Also: a partial sum
// rolls to the partial sum of the rolled tensor; the adjoint is roll by -k (<roll(a, k), b> =
// <a, roll(b, -k)>, to float rounding); an rvalue rolled by a multiple of the axis's size keeps
// its buffer; a dim that does not split into equal blocks is refused, naming dim, axis and
// extent. The compile-time refusals are tests/compile_fail's ROLL_* cases.
#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tpx/tpx.hpp>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, D);

using tpx::Tensor;

// numpy.roll of a row-major [rows, cols] array along `dim` (0 or 1) by `by` elements, within
// segments of `segment` elements of that dim (the whole dim when segment is its extent).
template <class T>
std::vector<T> rolled(const std::vector<T>& g, std::int64_t rows, std::int64_t cols, int dim,
                      std::int64_t segment, std::int64_t by) {
  std::vector<T> out(g.size());
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::int64_t along = dim == 0 ? i : j;
      const std::int64_t start = along / segment * segment;
      const std::int64_t to = start + ((along - start + by) % segment + segment) % segment;
      out[static_cast<std::size_t>(dim == 0 ? to * cols + j : i * cols + to)] =
          g[static_cast<std::size_t>(i * cols + j)];
    }
  return out;
}

// The values as fp32, exact for both element types, so that whole arrays compare with ==.
template <class T>
std::vector<float> values(const std::vector<T>& v) {
  return std::vector<float>(v.begin(), v.end());
}

template <class T>
void check_rolls(int mx, int my) {
  CAPTURE(mx);
  CAPTURE(my);
  const std::int64_t rows = 2 * mx * my, cols = 3 * mx * my;
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
    const auto outer = tpx::randn<T, B<X>, D<Y>>(rank, {B(rows), D(cols)}, 1);
    const auto inner = tpx::randn<T, B<Y>, D<X>>(rank, {B(rows), D(cols)}, 2);
    const auto nested = tpx::randn<T, B<>, D<Y, X>>(rank, {B(rows), D(cols)}, 3);
    const std::vector<T> g_outer = tpx::to_global(outer), g_inner = tpx::to_global(inner),
                         g_nested = tpx::to_global(nested);
    for (int k = -5; k <= 6; ++k) {
      CAPTURE(k);
      const auto a = tpx::roll<X, B>(outer, k);
      static_assert(std::is_same_v<std::remove_const_t<decltype(a)>, Tensor<T, B<X>, D<Y>>>);
      CHECK(values(tpx::to_global(a)) ==
            values(rolled(g_outer, rows, cols, 0, rows, k * (rows / mx))));
      const auto b = tpx::roll<X, D>(inner, k);
      CHECK(values(tpx::to_global(b)) ==
            values(rolled(g_inner, rows, cols, 1, cols, k * (cols / mx))));
      // D's Y-blocks of cols / my elements each roll their own X-blocks.
      const auto c = tpx::roll<X, D>(nested, k);
      CHECK(values(tpx::to_global(c)) ==
            values(rolled(g_nested, rows, cols, 1, cols / my, k * (cols / (my * mx)))));
      const auto d = tpx::roll<Y, D>(outer, k);
      CHECK(values(tpx::to_global(d)) ==
            values(rolled(g_outer, rows, cols, 1, cols, k * (cols / my))));
    }
  });
}

TEST_CASE("roll moves each block k ranks along the axis, as numpy.roll of the global tensor") {
  for (const auto& [mx, my] : {std::pair{1, 1}, {2, 1}, {3, 1}, {1, 2}, {2, 2}, {3, 2}, {4, 2}}) {
    check_rolls<float>(mx, my);
    check_rolls<tpx::bf16>(mx, my);
  }
}

TEST_CASE("a partial sum rolls to the partial sum of the rolled tensor") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{3, 2}, [](auto& rank) {
    const auto t = tpx::randn<float, B<X>, D<Y>>(rank, {B(6), D(4)}, 4);
    const auto partial = tpx::embed<Y, D>(t);  // [B_X, D]{U_Y}
    for (int k : {-1, 1, 2}) {
      CAPTURE(k);
      const auto rolled_partial = tpx::roll<X, B>(partial, k);
      static_assert(std::is_same_v<std::remove_const_t<decltype(rolled_partial)>,
                                   std::remove_const_t<decltype(partial)>>);
      CHECK(tpx::to_global(tpx::all_reduce<Y>(rolled_partial)) ==
            tpx::to_global(tpx::all_reduce<Y>(tpx::embed<Y, D>(tpx::roll<X, B>(t, k)))));
    }
  });
}

TEST_CASE("roll's adjoint is roll by -k: <roll(a, k), b> = <a, roll(b, -k)>") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{4, 1}, [](auto& rank) {
    const auto a = tpx::randn<float, B<X>, D<>>(rank, {B(8), D(5)}, 5);
    const auto b = tpx::randn<float, B<X>, D<>>(rank, {B(8), D(5)}, 6);
    const auto dot = [](const std::vector<float>& u, const std::vector<float>& v) {
      double s = 0;
      for (std::size_t i = 0; i < u.size(); ++i) s += double{u[i]} * v[i];
      return s;
    };
    for (int k = -3; k <= 3; ++k) {
      CAPTURE(k);
      const double left = dot(tpx::to_global(tpx::roll<X, B>(a, k)), tpx::to_global(b));
      const double right = dot(tpx::to_global(a), tpx::to_global(tpx::roll<X, B>(b, -k)));
      CHECK(left == doctest::Approx(right).epsilon(1e-12));
    }
  });
}

TEST_CASE("an rvalue rolled by a multiple of the axis's size keeps its buffer") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{3, 1}, [](auto& rank) {
    auto t = tpx::randn<float, B<X>, D<>>(rank, {B(6), D(2)}, 7);
    const std::vector<float> before = tpx::to_global(t);
    const float* buffer = t.data();
    const auto same = tpx::roll<X, B>(std::move(t), 3);
    CHECK(same.data() == buffer);
    CHECK(tpx::to_global(same) == before);
    auto u = tpx::randn<float, B<X>, D<>>(rank, {B(6), D(2)}, 8);
    const std::vector<float> u_global = tpx::to_global(u);
    const auto moved = tpx::roll<X, B>(std::move(u), 1);  // an exchange: a new buffer
    CHECK(tpx::to_global(moved) == rolled(u_global, 6, 2, 0, 6, 2));
  });
}

TEST_CASE("a dim that does not split into equal blocks is refused, naming dim, axis and extent") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [](auto& rank) {
    const auto t = tpx::randn<float, B<X>, D<>>(rank, {B(5), D(2)}, 9);
    try {
      (void)tpx::roll<X, B>(t, 1);
      FAIL("roll of 5 rows over 2 ranks did not throw");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK(what.find("roll<X, B>: dim B of [B_X, D] has 5 elements") != std::string::npos);
      CHECK(what.find("2 ranks of mesh axis X") != std::string::npos);
    }
  });
}

}  // namespace

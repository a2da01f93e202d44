// tpx::nn::gelu_product and gelu_product_backward (nn/gelu_product.hpp) on sharded operands
// against naive loops over the whole tensors in double, with GELU written as the notes write it,
// x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its derivative by the product rule: not
// through kernels::gelu, whose exp form the host twin shares with the GPU.
// Covered: the MLP's up projection [B_X, D_Y] *_D [D, F_Y] (an AllGather of D on the left), the
// sequence model's [B_X, T, D] *_D [D, F_Y], a product with a batch dim (several GEMMs, stored
// and then activated), and the backward products [B_X, D] *_D [F_Y, D] and, as a partial sum,
// [B_X, D_Y] *_D [F, D_Y] -> [B_X, F]{U_Y}, reduced by the test; on meshes 1x1, 2x2, 2x3 and
// 3x1 with extents that do not divide, in fp32 and bf16.
// Tolerances, relative to the largest magnitude of the reference: 2e-5 in fp32 (sums of 10 to
// 12 terms); 3e-2 in bf16, whose inputs and outputs are rounded to 8 bits (2^-8 = 4e-3 each, the
// pre-activation's rounding moved through GELU's slope, at most 1.13).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tpx/nn/gelu_product.hpp>
#include <tpx/tpx.hpp>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../support/gelu_reference.hpp"

namespace {

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, T, D, F);

const std::vector<std::pair<int, int>> meshes = {{1, 1}, {2, 2}, {2, 3}, {3, 1}};

std::vector<float> values(std::int64_t n, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[i] = tpx::kernels::normal_at(seed, static_cast<std::uint64_t>(i));
  return v;
}

// The values converted to T.
template <class Elem>
std::vector<Elem> as(const std::vector<float>& v) {
  return std::vector<Elem>(v.begin(), v.end());
}
// The values as T holds them, back in float: the reference's inputs.
template <class Elem>
std::vector<float> held_as(const std::vector<float>& v) {
  const std::vector<Elem> held = as<Elem>(v);
  return std::vector<float>(held.begin(), held.end());
}

using tpx::testing::gelu_reference;
using tpx::testing::gelu_reference_slope;

// c[i, j] = sum_k a[i, k] b(k, j), b given as a function of (k, j): the naive product in double.
template <class Right>
std::vector<double> product(const std::vector<float>& a, std::int64_t m, std::int64_t k,
                            std::int64_t n, const Right& b) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t l = 0; l < k; ++l) c[i * n + j] += double(a[i * k + l]) * b(l, j);
  return c;
}

template <class Elem>
double tolerance() {
  return std::is_same_v<Elem, float> ? 2e-5 : 3e-2;
}

// |got - want| <= tol * max |want| elementwise.
template <class Elem>
void check_close(const std::vector<Elem>& got, const std::vector<double>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  double scale = 1e-3;
  for (double v : want) scale = std::max(scale, std::abs(v));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(static_cast<double>(static_cast<float>(got[i])) - want[i]) <=
          tolerance<Elem>() * scale))
      ++bad;
  INFO(std::string(what) << ": " << bad << " of " << got.size() << " elements beyond "
                         << tolerance<Elem>() << " of " << scale);
  CHECK(bad == 0);
}

template <class Elem>
void check_mlp_products() {
  const std::int64_t rows = 7, d = 10, f = 9;
  const auto x = held_as<Elem>(values(rows * d, 1)), w_in = held_as<Elem>(values(d * f, 2));
  const auto dy = held_as<Elem>(values(rows * d, 3)), w_out = held_as<Elem>(values(f * d, 4));
  const auto a =
      product(x, rows, d, f, [&](std::int64_t k, std::int64_t j) { return w_in[k * f + j]; });
  std::vector<double> g(a.size()), da(a.size());
  // The backward's pre-activation is the forward's, as the layer keeps it: rounded to Elem.
  const auto dg =
      product(dy, rows, d, f, [&](std::int64_t k, std::int64_t j) { return w_out[j * d + k]; });
  for (std::size_t i = 0; i < a.size(); ++i) {
    g[i] = gelu_reference(a[i]);
    da[i] = dg[i] * gelu_reference_slope(static_cast<float>(static_cast<Elem>(a[i])));
  }
  for (const auto& mesh : meshes) {
    const int mx = std::get<0>(mesh), my = std::get<1>(mesh);
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      const auto xs = tpx::from_global<Elem, B<X>, D<Y>>(rank, {B(rows), D(d)}, as<Elem>(x));
      const auto ws = tpx::from_global<Elem, D<>, F<Y>>(rank, {D(d), F(f)}, as<Elem>(w_in));
      const auto up = tpx::nn::gelu_product<D>(xs, ws);
      static_assert(
          std::is_same_v<std::remove_cvref_t<decltype(up.out)>, tpx::Tensor<Elem, B<X>, F<Y>>>);
      check_close(tpx::to_global(up.pre), a, "pre-activation");
      check_close(tpx::to_global(up.out), g, "GELU");

      const auto dys = tpx::from_global<Elem, B<X>, D<>>(rank, {B(rows), D(d)}, as<Elem>(dy));
      const auto wos = tpx::from_global<Elem, F<Y>, D<>>(rank, {F(f), D(d)}, as<Elem>(w_out));
      const auto das = tpx::nn::gelu_product_backward<D>(up.pre, dys, wos);
      static_assert(
          std::is_same_v<std::remove_cvref_t<decltype(das)>, tpx::Tensor<Elem, B<X>, F<Y>>>);
      check_close(tpx::to_global(das), da, "gradient");

      // The gradient product as a partial sum over Y: each rank's share times GELU', reduced.
      const auto dys_y = tpx::from_global<Elem, B<X>, D<Y>>(rank, {B(rows), D(d)}, as<Elem>(dy));
      const auto wos_y = tpx::from_global<Elem, F<>, D<Y>>(rank, {F(f), D(d)}, as<Elem>(w_out));
      const auto pre = tpx::reshard<tpx::Tensor<Elem, B<X>, F<>>>(up.pre);
      const auto partial = tpx::nn::gelu_product_backward<D>(pre, dys_y, wos_y);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(partial)>,
                                   tpx::Tensor<Elem, B<X>, F<>, tpx::Unreduced<Y>>>);
      check_close(tpx::to_global(tpx::reshard<tpx::Tensor<Elem, B<X>, F<>>>(partial)), da,
                  "gradient from partial sums");
    });
  }
}

}  // namespace

TEST_CASE(
    "gelu_product and its backward on [B_X, D_Y] *_D [D, F_Y] equal GELU of the product, fp32") {
  check_mlp_products<float>();
}

TEST_CASE(
    "gelu_product and its backward on [B_X, D_Y] *_D [D, F_Y] equal GELU of the product, bf16") {
  check_mlp_products<tpx::bf16>();
}

TEST_CASE(
    "gelu_product on sequences [B_X, T, D], and with a batch dim, equals GELU of the product") {
  const std::int64_t nb = 3, nt = 5, d = 6, f = 10;
  const auto x = values(nb * nt * d, 5), w = values(d * f, 6), wb = values(nb * d * f, 7);
  const auto shared =
      product(x, nb * nt, d, f, [&](std::int64_t k, std::int64_t j) { return w[k * f + j]; });
  std::vector<double> batched(static_cast<std::size_t>(nb * nt * f));
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t t = 0; t < nt; ++t)
      for (std::int64_t j = 0; j < f; ++j)
        for (std::int64_t k = 0; k < d; ++k)
          batched[(b * nt + t) * f + j] +=
              double(x[(b * nt + t) * d + k]) * wb[(b * d + k) * f + j];
  for (const auto& mesh : meshes) {
    const int mx = std::get<0>(mesh), my = std::get<1>(mesh);
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      const auto xs = tpx::from_global<float, B<X>, T<>, D<>>(rank, {B(nb), T(nt), D(d)}, x);
      const auto ws = tpx::from_global<float, D<>, F<Y>>(rank, {D(d), F(f)}, w);
      const auto wbs = tpx::from_global<float, B<X>, D<>, F<Y>>(rank, {B(nb), D(d), F(f)}, wb);
      const auto check = [](const auto& up, const std::vector<double>& want) {
        std::vector<double> g(want.size());
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = gelu_reference(want[i]);
        check_close(tpx::to_global(up.pre), want, "pre-activation");
        check_close(tpx::to_global(up.out), g, "GELU");
      };
      check(tpx::nn::gelu_product<D>(xs, ws), shared);
      check(tpx::nn::gelu_product<D>(xs, wbs), batched);
    });
  }
}

TEST_CASE(
    "gelu_product_backward refuses a pre-activation whose extents differ from the product's") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 2}, [&](auto& rank) {
    const auto pre = tpx::zeros<float, B<X>, F<Y>>(rank, {B(4), F(6)});
    const auto dy = tpx::zeros<float, B<X>, D<>>(rank, {B(4), D(3)});
    const auto w = tpx::zeros<float, F<Y>, D<>>(rank, {F(8), D(3)});
    CHECK_THROWS_WITH_AS(
        tpx::nn::gelu_product_backward<D>(pre, dy, w),
        doctest::Contains(
            "the pre-activation [B_X, F_Y] has extents [4, 6], the product [B_X, F_Y] [4, 8]"),
        std::invalid_argument);
  });
}

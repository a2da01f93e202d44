// Tests of the per-element and per-row math of kernels/: elementwise functors and transform(),
// rotary embedding's rotation, the host's exp, reductions, softmax cross-entropy, RMSNorm,
// LayerNorm and the AdamW update, each against an independent formula in double; and the pieces
// the CUDA kernels assemble rows from (a row split into chunks, as threads split it) against the
// row functions.
//
// Derivatives (GELU, ReLU, RMSNorm) are checked against central finite differences of the double
// formula, (f(x+h) - f(x-h)) / 2h with h = 1e-4, whose own error (h^2 f''' / 6 plus rounding
// 2^-53 / h) is below 1e-8 here, far under the fp32 tolerances. Every tolerance is stated beside
// its check, in units of u = 2^-24, the unit roundoff of fp32.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tpx/core/bfloat16.hpp"
#include "tpx/kernels/cross_entropy.hpp"
#include "tpx/kernels/elementwise.hpp"
#include "tpx/kernels/grid_walk.hpp"
#include "tpx/kernels/layernorm.hpp"
#include "tpx/kernels/optimizer.hpp"
#include "tpx/kernels/permute.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/kernels/rmsnorm.hpp"
#include "tpx/kernels/rotary.hpp"
#include "tpx/kernels/vectorizable_expf.hpp"

namespace {

using tpx::bf16;
using std::int64_t;
namespace k = tpx::kernels;

constexpr double u = 0x1.0p-24;  // fp32 unit roundoff
constexpr double h = 1e-4;       // finite-difference step
constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

const std::vector<float> sample_points = {-6.0f, -3.5f, -1.25f, -0.5f, -0.1f, -1e-3f, 0.0f,
                                          1e-3f, 0.1f,  0.5f,  1.0f,  2.75f, 4.0f,  8.0f};

std::vector<float> random_floats(int64_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

template <class F>
double central_difference(F f, double x) {
  return (f(x + h) - f(x - h)) / (2.0 * h);
}

}  // namespace

TEST_CASE("arithmetic functors equal the direct formula") {
  for (float x : sample_points) {
    for (float y : {-2.5f, 0.0f, 0.3f, 7.0f}) {
      // Same float operation on both sides: exact equality.
      CHECK(k::add{}(x, y) == x + y);
      CHECK(k::sub{}(x, y) == x - y);
      CHECK(k::mul{}(x, y) == x * y);
      CHECK(k::scale{y}(x) == y * x);
      CHECK(k::square{}(x) == x * x);
      // One rounding of the exact a*x + y (exact in double: the product of two floats has 48 bits).
      const double exact = static_cast<double>(y) * x + 0.25;
      CHECK(std::abs(k::axpy{y}(x, 0.25f) - exact) <= u * std::abs(exact));
    }
  }
}

TEST_CASE("relu and its derivative") {
  for (float x : sample_points) {
    CHECK(k::relu{}(x) == (x > 0.0f ? x : 0.0f));
    if (std::abs(x) > h) {  // away from the kink, the finite difference is exact up to rounding
      const double fd = central_difference([](double v) { return std::max(v, 0.0); }, x);
      CHECK(std::abs(k::relu_backward{}(x, 1.5f) - 1.5 * fd) <= 1e-9);
    }
  }
  CHECK(k::relu_backward{}(0.0f, 1.0f) == 0.0f);
  CHECK(std::isnan(k::relu{}(nan_f)));  // NaN is propagated, not clipped
}

TEST_CASE("gelu (tanh approximation) and its derivative") {
  for (float x : sample_points) {
    CAPTURE(x);
    // The error is that of p = 1 / (1 + expf(-2u)), a few ulps of 1, times x: |err| <= 8u (1 + |x|).
    CHECK(std::abs(k::gelu{}(x) - gelu_ref(x)) <= 8 * u * (1.0 + std::abs(x)));
    // The derivative carries one more factor x from its second term: |err| <= 16u (1 + x^2) |dy|.
    const float dy = -0.7f;
    const double expected = dy * central_difference(gelu_ref, x);
    CHECK(std::abs(k::gelu_backward{}(x, dy) - expected) <= 16 * u * (1.0 + x * x) * std::abs(dy));
  }
  // Known values of the GPT-2 GELU.
  CHECK(k::gelu{}(0.0f) == 0.0f);
  CHECK(k::gelu{}(1.0f) == doctest::Approx(0.8411920).epsilon(1e-6));
  CHECK(k::gelu{}(-1.0f) == doctest::Approx(-0.1588080).epsilon(1e-5));
}

TEST_CASE("SwiGLU's silu(g) * u and its two derivatives, against double and finite differences") {
  const auto silu_ref = [](double g) { return g / (1.0 + std::exp(-g)); };
  for (float g : sample_points) {
    for (float up : {-1.5f, 0.25f, 3.0f}) {
      CAPTURE(g);
      CAPTURE(up);
      // sigmoid's error is a few ulps of 1 (expf's, then a division), times |g u|.
      CHECK(std::abs(k::silu_product{}(g, up) - silu_ref(g) * up) <=
            8 * u * (1.0 + std::abs(g)) * std::abs(up));
      const float dy = -0.7f;
      const double gate = dy * up * central_difference(silu_ref, g);
      // The slope's second term carries a factor g: |err| <= 16u (1 + g^2) |u dy|, plus the
      // central difference's own O(h^2) error.
      CHECK(std::abs(k::silu_product_gate_backward{}(g, up, dy) - gate) <=
            16 * u * (1.0 + g * g) * std::abs(up * dy) + 1e-7);
      CHECK(std::abs(k::silu_product_up_backward{}(g, dy) - dy * silu_ref(g)) <=
            8 * u * (1.0 + std::abs(g)) * std::abs(dy));
    }
  }
  // Far below zero the gate closes: silu and both slopes are (minus) zero, never NaN.
  CHECK(k::silu_product{}(-200.0f, 2.0f) == 0.0f);
  CHECK(k::silu_product_gate_backward{}(-200.0f, 2.0f, 1.0f) == 0.0f);
  CHECK(k::silu_product_up_backward{}(-200.0f, 1.0f) == 0.0f);
  CHECK(k::silu_product{}(1.0f, 1.0f) == doctest::Approx(0.7310586).epsilon(1e-6));
}

namespace {
// Rows [positions, heads] of width e, turned by k::rotary_turn starting at global position
// `first`, forward (direction 1) or back (-1), a row at a time as a space's loop calls it.
template <class T>
void turn_rows(std::vector<T>& x, int64_t positions, int64_t heads, int64_t e, int64_t first,
               float direction, double base = 10000.0) {
  const k::rotary_turn<T> turn{x.data(), e,         heads, positions, first,
                               positions, 0,         static_cast<float>(std::log2(base)),
                               direction};
  for (int64_t r = 0; r < positions * heads; ++r)
    for (int64_t i = 0; i < e / 2; ++i) turn(r, i);
}
}  // namespace

TEST_CASE("rotary_turn against the rotation in double, its inverse, and relative positions") {
  const int64_t positions = 9, heads = 3, e = 8, half = e / 2;
  const double base = 10000.0;
  for (const int64_t first : {int64_t{0}, int64_t{1000}}) {
    CAPTURE(first);
    const std::vector<float> x = random_floats(positions * heads * e, -2.0f, 2.0f, 11);
    std::vector<float> turned = x;
    turn_rows(turned, positions, heads, e, first, 1.0f);
    // The angle p theta_i is rounded three times in fp32 (exp2f's few ulps, the product), an
    // absolute error of about 4u |angle|; sin and cos add a few ulps: per element
    // |err| <= 8u (1 + |angle|) (|a| + |b|).
    for (int64_t r = 0; r < positions * heads; ++r) {
      const double p = static_cast<double>(first + r / heads);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = p * std::pow(base, -static_cast<double>(i) / half);
        const double a = x[r * e + i], b = x[r * e + i + half];
        const double tol = 8 * u * (1.0 + angle) * (std::abs(a) + std::abs(b));
        CHECK(std::abs(turned[r * e + i] - (a * std::cos(angle) - b * std::sin(angle))) <= tol);
        CHECK(std::abs(turned[r * e + i + half] - (b * std::cos(angle) + a * std::sin(angle))) <=
              tol);
      }
    }
    // Turning back restores x: two roundings per element and the angle's error cancels, as both
    // directions compute the same angle: |err| <= 4u (|a| + |b|).
    std::vector<float> back = turned;
    turn_rows(back, positions, heads, e, first, -1.0f);
    for (int64_t r = 0; r < positions * heads; ++r)
      for (int64_t i = 0; i < e; ++i) {
        const int64_t j = r * e + (i < half ? i + half : i - half);
        CHECK(std::abs(back[r * e + i] - x[r * e + i]) <=
              4 * u * (std::abs(x[r * e + i]) + std::abs(x[j])) + 1e-30);
      }
  }
  // A query at position m and a key at n have the same product as at m + s and n + s: RoPE's
  // point. With positions up to 1030 and |a| + |b| <= 2, each turned element is off by at most
  // 16u * 1031 (above) and is at most sqrt(2) in size, so each product by at most
  // 2 e sqrt(2) 16u 1031 (about 0.02), and two products' difference by twice that.
  const std::vector<float> q = random_floats(e, -1.0f, 1.0f, 12);
  const std::vector<float> key = random_floats(e, -1.0f, 1.0f, 13);
  const auto product_at = [&](int64_t m, int64_t n) {
    std::vector<float> qm = q, kn = key;
    turn_rows(qm, 1, 1, e, m, 1.0f);
    turn_rows(kn, 1, 1, e, n, 1.0f);
    double dot = 0;
    for (int64_t i = 0; i < e; ++i) dot += double(qm[i]) * kn[i];
    return dot;
  };
  for (const auto& [m, n] : std::vector<std::pair<int64_t, int64_t>>{{5, 2}, {2, 5}, {7, 7}}) {
    CAPTURE(m);
    CAPTURE(n);
    const double at = product_at(m, n);
    for (const int64_t shift : {int64_t{1}, int64_t{30}, int64_t{1023}})
      CHECK(std::abs(product_at(m + shift, n + shift) - at) <= 2 * 2 * e * 1.5 * 16 * u * 1031);
  }
  // Stored as bf16 the rotation rounds once per element: within 2^-8 of the fp32 result's size.
  std::vector<float> f(static_cast<std::size_t>(e));
  std::vector<bf16> b(static_cast<std::size_t>(e));
  for (int64_t i = 0; i < e; ++i) b[i] = bf16(q[i]), f[i] = static_cast<float>(b[i]);
  turn_rows(f, 1, 1, e, 3, 1.0f);
  turn_rows(b, 1, 1, e, 3, 1.0f);
  for (int64_t i = 0; i < e; ++i)
    CHECK(std::abs(static_cast<float>(b[i]) - f[i]) <= 0x1.0p-8 * std::abs(f[i]));
}

TEST_CASE(
    "vectorizable_expf: within 1.03 ulps of exp over the float range, and exp's special values") {
  // Every 1021st float of [-104, 89] (2.2 million, subnormal results included), called directly
  // and through transform, whose loop may be the AVX2 + FMA one (kernels/host_loop.hpp). The
  // header's bound, 1.03 ulps, holds for every float of the range (checked once, exhaustively).
  std::vector<float> x;
  for (const float last : {89.0f, -104.0f}) {  // from +-0 up the bits to `last`
    const std::uint32_t end = std::bit_cast<std::uint32_t>(last);
    for (std::uint32_t bits = end & 0x80000000u; bits <= end; bits += 1021)
      x.push_back(std::bit_cast<float>(bits));
  }
  std::vector<float> y(x.size());
  const auto exp_of = [](float v) { return k::vectorizable_expf(v); };
  k::transform(static_cast<int64_t>(x.size()), exp_of, y.data(), x.data());
  // |error| in units of the last place of the float nearest the exact value (for a subnormal
  // one, of the smallest subnormal).
  const auto ulps = [](float got, double exact) {
    int exponent = 0;
    std::frexp(static_cast<double>(static_cast<float>(exact)), &exponent);
    const double ulp =
        exact < std::numeric_limits<float>::min() ? 0x1.0p-149 : std::ldexp(1.0, exponent - 24);
    return std::abs(got - exact) / ulp;
  };
  double worst_direct = 0.0, worst_loop = 0.0;
  std::size_t missed_overflows = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double exact = std::exp(static_cast<double>(x[i]));
    const float direct = k::vectorizable_expf(x[i]);
    if (static_cast<float>(exact) == inf_f) {  // beyond FLT_MAX: both must overflow
      missed_overflows += (direct != inf_f) + (y[i] != inf_f);
      continue;
    }
    worst_direct = std::max(worst_direct, ulps(direct, exact));
    worst_loop = std::max(worst_loop, ulps(y[i], exact));
  }
  CHECK(x.size() > 2'000'000);
  CHECK(worst_direct <= 1.03);
  CHECK(worst_loop <= 1.03);
  CHECK(missed_overflows == 0);

  CHECK(k::vectorizable_expf(0.0f) == 1.0f);
  CHECK(k::vectorizable_expf(-0.0f) == 1.0f);
  CHECK(k::vectorizable_expf(inf_f) == inf_f);
  CHECK(k::vectorizable_expf(-inf_f) == 0.0f);
  CHECK(std::isnan(k::vectorizable_expf(nan_f)));
  CHECK(std::isnan(k::vectorizable_expf(-nan_f)));
  CHECK(k::vectorizable_expf(88.72f) < inf_f);  // 3.4e38, just below FLT_MAX
  CHECK(k::vectorizable_expf(88.73f) == inf_f);
  CHECK(k::vectorizable_expf(1e30f) == inf_f);
  CHECK(k::vectorizable_expf(-103.9f) > 0.0f);  // 2^-149.9: the smallest subnormal
  CHECK(k::vectorizable_expf(-104.0f) == 0.0f);
  CHECK(k::vectorizable_expf(-1e30f) == 0.0f);
}

TEST_CASE("transform applies a functor to float and bf16 storage, in place too") {
  const std::vector<float> x = random_floats(37, -3.0f, 3.0f, 1), y = random_floats(37, -3.0f, 3.0f, 2);
  std::vector<float> out(x.size());
  k::transform(static_cast<int64_t>(x.size()), k::axpy{2.0f}, out.data(), x.data(), y.data());
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(out[i] == std::fma(2.0f, x[i], y[i]));

  // bf16 in, bf16 out: widen, compute in fp32, round once.
  std::vector<bf16> xb(x.begin(), x.end()), yb(y.begin(), y.end()), outb(x.size());
  k::transform(static_cast<int64_t>(x.size()), k::mul{}, outb.data(), xb.data(), yb.data());
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(outb[i].bits == bf16(float(xb[i]) * float(yb[i])).bits);

  // Mixed: bf16 in, float out, in place on a float buffer.
  std::vector<float> acc = y;
  k::transform(static_cast<int64_t>(x.size()), k::add{}, acc.data(), acc.data(), xb.data());
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(acc[i] == y[i] + float(xb[i]));

  k::transform(0, k::relu{}, out.data(), x.data());  // n == 0 touches nothing
}

TEST_CASE("sum and sum of squares: the host helpers return the exact sum rounded once") {
  // 1e6 copies of 0.1f: a serial fp32 sum drifts by ~1%; a double accumulator does not.
  const std::vector<float> tenths(1'000'000, 0.1f);
  const double exact = 1e6 * static_cast<double>(0.1f);
  const int64_t n = static_cast<int64_t>(tenths.size());
  // Tolerance: one fp32 rounding of the result (u |exact|) plus the double accumulation (n 2^-53 |exact|).
  CHECK(std::abs(k::sum(n, tenths.data()) - exact) <= (u + 1e6 * 0x1.0p-53) * exact);
  CHECK(std::abs(k::reduce(n, tenths.data(), k::sum_reducer<float>{}) - exact) > 1e-3 * exact);  // why double

  const std::vector<float> x = random_floats(1001, -2.0f, 2.0f, 3);
  double s = 0.0, ss = 0.0;
  for (float v : x) s += v, ss += static_cast<double>(v) * v;
  const int64_t m = static_cast<int64_t>(x.size());
  CHECK(std::abs(k::sum(m, x.data()) - s) <= u * std::abs(s) + 1e-12);
  CHECK(std::abs(k::sum_of_squares(m, x.data()) - ss) <= u * ss);
  // fp32 accumulation, as the per-row kernels use: the serial bound (n - 1) u sum |x_i|.
  double abs_sum = 0.0;
  for (float v : x) abs_sum += std::abs(v);
  CHECK(std::abs(k::reduce(m, x.data(), k::sum_reducer<float>{}) - s) <= (m - 1) * u * abs_sum);

  const std::vector<bf16> xb(x.begin(), x.end());
  double sb = 0.0;
  for (bf16 v : xb) sb += float(v);
  CHECK(std::abs(k::sum(m, xb.data()) - sb) <= u * std::abs(sb) + 1e-12);

  CHECK(k::sum(0, x.data()) == 0.0f);
  CHECK(k::sum_of_squares(0, x.data()) == 0.0f);
}

TEST_CASE("maximum, with NaN propagation and -inf for an empty range") {
  const std::vector<float> x = random_floats(513, -5.0f, 5.0f, 4);
  const int64_t n = static_cast<int64_t>(x.size());
  CHECK(k::maximum(n, x.data()) == *std::max_element(x.begin(), x.end()));
  CHECK(k::maximum(0, x.data()) == -inf_f);
  for (std::size_t where : {std::size_t{0}, std::size_t{200}, x.size() - 1}) {
    std::vector<float> y = x;
    y[where] = nan_f;
    CHECK(std::isnan(k::maximum(n, y.data())));
  }
}

namespace {

// Softmax of a row in double, shifted by the maximum so large logits stay finite.
std::vector<double> softmax_ref(const std::vector<float>& x) {
  const double m = *std::max_element(x.begin(), x.end());
  double s = 0.0;
  for (float v : x) s += std::exp(v - m);
  std::vector<double> p;
  for (float v : x) p.push_back(std::exp(v - m) / s);
  return p;
}

double cross_entropy_ref(const std::vector<float>& x, int64_t target) {
  return -std::log(softmax_ref(x)[static_cast<std::size_t>(target)]);
}

// Rows of logits: moderate, large (around 1e4, where exp would overflow), and negative large.
std::vector<std::vector<float>> logit_rows() {
  std::vector<std::vector<float>> rows;
  for (int64_t n : {1, 2, 7, 100, 1000}) rows.push_back(random_floats(n, -8.0f, 8.0f, static_cast<unsigned>(n)));
  for (float offset : {1e4f, -1e4f, 80.0f}) {
    std::vector<float> r = random_floats(257, -4.0f, 4.0f, 9);
    for (float& v : r) v += offset;
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

// Tolerances for n <= 1000 classes: the fp32 sum of exp(x - max) is off by about sqrt(n) u
// (a random walk: ~32u at n = 1000; the worst case is (n - 1) u), expf and logf by 1-2 ulps. We
// allow 100u (6e-6) for the loss and, relative, for each probability: over 800 random rows we
// measured at most 7u and 39u, while a formula error shows up as 1e-3 or more.
TEST_CASE("softmax cross-entropy forward vs a double reference, including logits near +-1e4") {
  for (const auto& x : logit_rows()) {
    const int64_t n = static_cast<int64_t>(x.size());
    CAPTURE(n);
    CAPTURE(x[0]);
    const std::vector<double> p_ref = softmax_ref(x);
    std::vector<float> p(x.size());
    k::softmax_row(n, x.data(), p.data());
    for (std::size_t j = 0; j < x.size(); ++j) CHECK(std::abs(p[j] - p_ref[j]) <= 100 * u * p_ref[j]);

    for (int64_t target : {int64_t{0}, n / 2, n - 1, static_cast<int64_t>(std::max_element(x.begin(), x.end()) - x.begin())}) {
      CAPTURE(target);
      const double loss_ref = cross_entropy_ref(x, target);
      const k::cross_entropy_forward_result r = k::cross_entropy_forward_row(n, x.data(), target);
      CHECK(std::abs(r.loss - loss_ref) <= 100 * u * (1.0 + loss_ref));
    }
  }
}

TEST_CASE("softmax cross-entropy backward: dloss * (softmax - onehot)") {
  for (const auto& x : logit_rows()) {
    const int64_t n = static_cast<int64_t>(x.size());
    const std::vector<double> p_ref = softmax_ref(x);
    const int64_t target = n / 3;
    const float dloss = 0.37f;
    const k::cross_entropy_forward_result r = k::cross_entropy_forward_row(n, x.data(), target);
    std::vector<float> g(x.size());
    k::cross_entropy_backward_row(n, x.data(), target, r.stats, dloss, g.data());
    for (int64_t j = 0; j < n; ++j) {
      const double ref = dloss * (p_ref[static_cast<std::size_t>(j)] - (j == target ? 1.0 : 0.0));
      // Error of p (100u relative, as above) plus one rounding of p - 1 (u).
      CHECK(std::abs(g[static_cast<std::size_t>(j)] - ref) <= dloss * (100 * u * p_ref[static_cast<std::size_t>(j)] + u));
    }
  }
}

TEST_CASE("softmax stats of the pieces of a row merge into the stats of the row") {
  const std::vector<float> x = random_floats(300, -20.0f, 20.0f, 5);
  const k::softmax_stats whole = k::softmax_stats_of(300, x.data());
  const k::softmax_stats a = k::softmax_stats_of(100, x.data());
  const k::softmax_stats b = k::softmax_stats_of(150, x.data() + 100);
  const k::softmax_stats c = k::softmax_stats_of(50, x.data() + 250);
  for (const k::softmax_stats& merged : {k::merge(k::merge(a, b), c), k::merge(c, k::merge(b, a))}) {
    CHECK(merged.max == whole.max);
    CHECK(std::abs(k::logsumexp(merged) - k::logsumexp(whole)) <= 100 * u * std::abs(k::logsumexp(whole)));
  }
  // Empty and fully masked pieces are identities.
  const std::vector<float> masked(4, -inf_f);
  for (const k::softmax_stats& none : {k::softmax_stats_of(0, x.data()), k::softmax_stats_of(4, masked.data())}) {
    CHECK(none.max == -inf_f);
    CHECK(none.sum == 0.0f);
    CHECK(k::merge(none, whole).sum == whole.sum);
    CHECK(k::merge(whole, none).max == whole.max);
    CHECK(k::merge(none, none).sum == 0.0f);
  }
}

TEST_CASE("cross-entropy: bf16 logits, and an invalid target gives NaN") {
  const std::vector<float> x = random_floats(64, -6.0f, 6.0f, 6);
  const std::vector<bf16> xb(x.begin(), x.end());
  const std::vector<float> widened(xb.begin(), xb.end());
  const double loss_ref = cross_entropy_ref(widened, 5);
  CHECK(std::abs(k::cross_entropy_forward_row(64, xb.data(), 5).loss - loss_ref) <= 100 * u * (1.0 + loss_ref));
  std::vector<bf16> gb(64);
  const auto r = k::cross_entropy_forward_row(64, xb.data(), 5);
  k::cross_entropy_backward_row(64, xb.data(), 5, r.stats, 1.0f, gb.data());
  const std::vector<double> p_ref = softmax_ref(widened);
  for (int64_t j = 0; j < 64; ++j) {  // plus the rounding of the output to bf16: 2^-8 relative
    const double ref = p_ref[static_cast<std::size_t>(j)] - (j == 5 ? 1.0 : 0.0);
    CHECK(std::abs(float(gb[static_cast<std::size_t>(j)]) - ref) <= 0x1.0p-8 * std::abs(ref) + 100 * u);
  }
  CHECK(std::isnan(k::cross_entropy_forward_row(64, x.data(), 64).loss));
  CHECK(std::isnan(k::cross_entropy_forward_row(64, x.data(), -1).loss));
}

namespace {

// RMSNorm in double, and L = sum_i g_i y_i, whose gradient the backward computes for dy = g.
std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  double ms = 0.0;
  for (double v : x) ms += v * v;
  const double r = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + eps);
  std::vector<double> y;
  for (std::size_t i = 0; i < x.size(); ++i) y.push_back(x[i] * r * w[i]);
  return y;
}

double weighted_output(const std::vector<double>& x, const std::vector<double>& w, const std::vector<float>& g,
                       double eps) {
  const std::vector<double> y = rmsnorm_ref(x, w, eps);
  double l = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) l += g[i] * y[i];
  return l;
}

}  // namespace

TEST_CASE("rmsnorm forward vs double, backward vs finite differences") {
  constexpr int64_t d = 48;
  constexpr float eps = 1e-5f;
  const std::vector<float> x = random_floats(d, -2.0f, 2.0f, 10), w = random_floats(d, 0.5f, 1.5f, 11);
  const std::vector<float> g = random_floats(d, -1.0f, 1.0f, 12);
  const std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end());

  std::vector<float> y(d);
  const float r = k::rmsnorm_forward_row(d, x.data(), w.data(), eps, y.data());
  const std::vector<double> y_ref = rmsnorm_ref(xd, wd, eps);
  double ms = 0.0;
  for (double v : xd) ms += v * v;
  // Tolerances: the fp32 sum of squares (d u relative) then a few roundings: 2 d u relative.
  CHECK(std::abs(r - 1.0 / std::sqrt(ms / d + eps)) <= 2 * d * u * r);
  for (int64_t i = 0; i < d; ++i) CHECK(std::abs(y[i] - y_ref[i]) <= 2 * d * u * (std::abs(y_ref[i]) + 1e-3));

  std::vector<float> dx(d), dw(d, 0.25f);  // dw starts non-zero: the backward accumulates into it
  k::rmsnorm_backward_row(d, x.data(), w.data(), r, g.data(), dx.data(), dw.data());
  for (int64_t j = 0; j < d; ++j) {
    CAPTURE(j);
    const auto along_x = [&](double v) { auto xs = xd; xs[j] = v; return weighted_output(xs, wd, g, eps); };
    const auto along_w = [&](double v) { auto ws = wd; ws[j] = v; return weighted_output(xd, ws, g, eps); };
    // dx sums d products of size ~1: absolute 4 d u; dw is one product: 8u relative (on top of 0.25).
    CHECK(std::abs(dx[j] - central_difference(along_x, xd[j])) <= 4 * d * u);
    CHECK(std::abs((dw[j] - 0.25) - central_difference(along_w, wd[j])) <= 8 * u + 1e-7);
  }
}

TEST_CASE("rmsnorm on bf16 activations with fp32 weights, in place") {
  constexpr int64_t d = 32;
  const std::vector<float> x = random_floats(d, -2.0f, 2.0f, 13), w = random_floats(d, 0.5f, 1.5f, 14);
  std::vector<bf16> xb(x.begin(), x.end());
  const std::vector<double> xd(xb.begin(), xb.end()), wd(w.begin(), w.end());
  const std::vector<double> y_ref = rmsnorm_ref(xd, wd, 1e-6);
  k::rmsnorm_forward_row(d, xb.data(), w.data(), 1e-6f, xb.data());
  for (int64_t i = 0; i < d; ++i) CHECK(std::abs(float(xb[i]) - y_ref[i]) <= 0x1.0p-8 * std::abs(y_ref[i]) + 2 * d * u);
}

TEST_CASE("identity converts between storage types, rounding to bf16 once") {
  for (float x : sample_points) {
    CHECK(k::identity{}(x) == x);
    CHECK(float(bf16(k::identity{}(x))) == float(bf16(x)));
  }
}

namespace {

// LayerNorm in double, and L = sum_i g_i y_i, whose gradient the backward computes for dy = g.
std::vector<double> layernorm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& b, double eps) {
  const double d = static_cast<double>(x.size());
  double mean = 0.0, var = 0.0;
  for (double v : x) mean += v / d;
  for (double v : x) var += (v - mean) * (v - mean) / d;
  std::vector<double> y;
  for (std::size_t i = 0; i < x.size(); ++i) y.push_back((x[i] - mean) / std::sqrt(var + eps) * w[i] + b[i]);
  return y;
}

double layernorm_weighted_output(const std::vector<double>& x, const std::vector<double>& w,
                                 const std::vector<double>& b, const std::vector<float>& g, double eps) {
  const std::vector<double> y = layernorm_ref(x, w, b, eps);
  double l = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) l += g[i] * y[i];
  return l;
}

}  // namespace

TEST_CASE("layernorm forward vs double, backward vs finite differences, for a row far from zero") {
  constexpr int64_t d = 48;
  constexpr float eps = 1e-5f;
  // Centred at 3: the two-pass variance must not cancel (E[x^2] - mean^2 would lose ~4 bits).
  const std::vector<float> x = random_floats(d, 2.0f, 4.0f, 20), w = random_floats(d, 0.5f, 1.5f, 21);
  const std::vector<float> b = random_floats(d, -0.5f, 0.5f, 22), g = random_floats(d, -1.0f, 1.0f, 23);
  const std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), bd(b.begin(), b.end());

  std::vector<float> y(d);
  const k::layernorm_stats s = k::layernorm_forward_row(d, x.data(), w.data(), b.data(), eps, y.data());
  const std::vector<double> y_ref = layernorm_ref(xd, wd, bd, eps);
  // The fp32 sums (d u relative to the magnitudes, amplified by 1/std ~ 2 here): 8 d u.
  for (int64_t i = 0; i < d; ++i) CHECK(std::abs(y[i] - y_ref[i]) <= 8 * d * u * (std::abs(y_ref[i]) + 1.0));

  std::vector<float> dx(d), dw(d, 0.25f), db(d, -0.5f);  // the parameter gradients accumulate
  k::layernorm_backward_row(d, x.data(), w.data(), s, g.data(), dx.data(), dw.data(), db.data());
  for (int64_t j = 0; j < d; ++j) {
    CAPTURE(j);
    auto xs = xd, ws = wd, bs = bd;
    const auto lx = [&](double v) { xs[j] = v; const double l = layernorm_weighted_output(xs, wd, bd, g, eps); xs[j] = xd[j]; return l; };
    const auto lw = [&](double v) { ws[j] = v; const double l = layernorm_weighted_output(xd, ws, bd, g, eps); ws[j] = wd[j]; return l; };
    const auto lb = [&](double v) { bs[j] = v; const double l = layernorm_weighted_output(xd, wd, bs, g, eps); bs[j] = bd[j]; return l; };
    // dx sums d products amplified by rstd ~ 2: absolute 16 d u; dw, db are single products.
    CHECK(std::abs(dx[j] - central_difference(lx, xd[j])) <= 16 * d * u);
    CHECK(std::abs((dw[j] - 0.25) - central_difference(lw, wd[j])) <= 16 * u + 1e-7);
    CHECK(std::abs((db[j] + 0.5) - central_difference(lb, bd[j])) <= 4 * u + 1e-7);
  }
}

// The CUDA row kernels give each thread a share of a row, combine the shares' partial results,
// and finish with the row's statistic; here the same pieces are assembled from three chunks
// on the host and must agree with the row functions (which are the pieces in a serial loop),
// to the rounding of a differently ordered sum.
TEST_CASE("row pieces: a row assembled from chunks equals the row functions") {
  constexpr int64_t d = 90;
  const int64_t cuts[] = {0, 31, 64, d};
  const std::vector<float> x = random_floats(d, -3.0f, 3.0f, 30), w = random_floats(d, 0.5f, 1.5f, 31);
  const std::vector<float> b = random_floats(d, -0.5f, 0.5f, 32), dy = random_floats(d, -1.0f, 1.0f, 33);

  SUBCASE("rmsnorm") {
    std::vector<float> y(d), dx(d), dw(d, 0.0f);
    const float r = k::rmsnorm_forward_row(d, x.data(), w.data(), 1e-5f, y.data());
    k::rmsnorm_backward_row(d, x.data(), w.data(), r, dy.data(), dx.data(), dw.data());
    float squares = 0.0f, terms = 0.0f;
    for (int c = 0; c < 3; ++c) {
      float chunk_squares = 0.0f, chunk_terms = 0.0f;
      for (int64_t i = cuts[c]; i < cuts[c + 1]; ++i) {
        chunk_squares = k::sum_of_squares_reducer<float>::combine(chunk_squares, k::sum_of_squares_reducer<float>::element(x[i]));
        chunk_terms += k::rmsnorm_backward_term(x[i], w[i], dy[i]);
      }
      squares += chunk_squares;
      terms += chunk_terms;
    }
    const float r_pieces = k::rmsnorm_inverse_rms(squares, d, 1e-5f);
    CHECK(std::abs(r_pieces - r) <= 2 * d * u * r);
    const float c = k::rmsnorm_backward_scale(terms, r_pieces, d);
    for (int64_t i = 0; i < d; ++i) {
      CHECK(std::abs(k::rmsnorm_output(x[i], r_pieces, w[i]) - y[i]) <= 4 * d * u * (std::abs(y[i]) + 1e-3));
      CHECK(std::abs(k::rmsnorm_input_gradient(x[i], w[i], dy[i], r_pieces, c) - dx[i]) <= 8 * d * u);
      CHECK(std::abs(k::rmsnorm_weight_gradient(x[i], dy[i], r_pieces) - dw[i]) <= 4 * d * u * (std::abs(dw[i]) + 1e-3));
    }
  }
  SUBCASE("layernorm") {
    std::vector<float> y(d), dx(d), dw(d, 0.0f), db(d, 0.0f);
    const k::layernorm_stats s = k::layernorm_forward_row(d, x.data(), w.data(), b.data(), 1e-5f, y.data());
    k::layernorm_backward_row(d, x.data(), w.data(), s, dy.data(), dx.data(), dw.data(), db.data());
    float sum = 0.0f;
    for (int c = 0; c < 3; ++c) {
      float chunk = 0.0f;
      for (int64_t i = cuts[c]; i < cuts[c + 1]; ++i) chunk += x[i];
      sum += chunk;
    }
    const float mean = k::layernorm_mean(sum, d);
    float variance = 0.0f;
    k::layernorm_backward_sums sums{0.0f, 0.0f};
    for (int c = 0; c < 3; ++c)
      for (int64_t i = cuts[c]; i < cuts[c + 1]; ++i) variance += k::layernorm_variance_term(x[i], mean);
    const k::layernorm_stats pieces{mean, k::layernorm_rstd(variance, d, 1e-5f)};
    CHECK(std::abs(pieces.mean - s.mean) <= 4 * d * u);
    CHECK(std::abs(pieces.rstd - s.rstd) <= 4 * d * u * s.rstd);
    for (int64_t i = 0; i < d; ++i) {
      const k::layernorm_backward_sums t = k::layernorm_backward_terms(x[i], w[i], dy[i], pieces);
      sums.w_dy += t.w_dy;
      sums.w_dy_xhat += t.w_dy_xhat;
    }
    for (int64_t i = 0; i < d; ++i) {
      CHECK(std::abs(k::layernorm_output(x[i], pieces, w[i], b[i]) - y[i]) <= 8 * d * u * (std::abs(y[i]) + 1.0));
      CHECK(std::abs(k::layernorm_input_gradient(x[i], w[i], dy[i], pieces, sums, d) - dx[i]) <= 16 * d * u);
      CHECK(std::abs(k::layernorm_weight_gradient(x[i], dy[i], pieces) - dw[i]) <= 8 * d * u * (std::abs(dw[i]) + 1e-3));
    }
  }
  SUBCASE("softmax cross-entropy, with the stats merged element by element") {
    const int64_t target = 40;
    std::vector<float> probs(d), grad(d);
    k::softmax_row(d, x.data(), probs.data());
    const auto forward = k::cross_entropy_forward_row(d, x.data(), target);
    k::cross_entropy_backward_row(d, x.data(), target, forward.stats, 0.5f, grad.data());
    k::softmax_stats row{-inf_f, 0.0f};
    for (int c = 0; c < 3; ++c) {
      k::softmax_stats chunk{-inf_f, 0.0f};
      for (int64_t i = cuts[c]; i < cuts[c + 1]; ++i) chunk = k::merge(chunk, k::softmax_stats_of(1, &x[i]));
      row = k::merge(row, chunk);
    }
    CHECK(row.max == forward.stats.max);
    CHECK(std::abs(k::cross_entropy_loss(row, x[target]) - forward.loss) <= 4 * d * u * (1.0 + forward.loss));
    for (int64_t i = 0; i < d; ++i) {
      CHECK(std::abs(k::softmax_element(x[i], row) - probs[i]) <= 4 * d * u * probs[i]);
      CHECK(std::abs(k::cross_entropy_gradient(x[i], i == target, row, 0.5f) - grad[i]) <= 4 * d * u);
    }
  }
}

TEST_CASE("adamw_update: one step against the formula in double") {
  const k::adamw_update update{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1 - 0.9f * 0.9f * 0.9f, 1 - 0.95f * 0.95f * 0.95f, 0.5f};
  const std::vector<float> ps = random_floats(50, -1.0f, 1.0f, 40), gs = random_floats(50, -2.0f, 2.0f, 41);
  const std::vector<float> ms = random_floats(50, -0.1f, 0.1f, 42), vs = random_floats(50, 0.0f, 0.05f, 43);
  for (std::size_t i = 0; i < ps.size(); ++i) {
    float p = ps[i], m = ms[i], v = vs[i];
    update(p, gs[i], m, v);
    // The reference takes the functor's float constants as exact values and works in double.
    const double b1 = update.beta1, b2 = update.beta2, g = double(update.grad_scale) * gs[i];
    const double m_ref = b1 * ms[i] + (1 - b1) * g, v_ref = b2 * vs[i] + (1 - b2) * g * g;
    const double m_hat = m_ref / update.bias_correction1, v_hat = v_ref / update.bias_correction2;
    const double p_ref = ps[i] - double(update.lr) * (m_hat / (std::sqrt(v_hat) + double(update.eps)) +
                                                      double(update.weight_decay) * ps[i]);
    // A handful of fp32 operations on O(1) values: 16u absolute each.
    CHECK(std::abs(m - m_ref) <= 16 * u);
    CHECK(std::abs(v - v_ref) <= 16 * u);
    CHECK(std::abs(p - p_ref) <= 16 * u);
  }
}

// src [2, 3, 4, 5] (dims 0..3, row-major) stored as dst in the order `order`: every row of dst
// (every dim but its last) starts in src where the coordinates say, and copies what they say.
TEST_CASE("a permute's rows start in the source at their coordinates; the last dim may stay last") {
  const std::int64_t src_extent[4] = {2, 3, 4, 5}, src_stride[4] = {60, 20, 5, 1};
  std::vector<int> src(120);
  for (int i = 0; i < 120; ++i) src[i] = i;
  for (const std::vector<int>& order : std::vector<std::vector<int>>{{0, 2, 1, 3}, {1, 0, 3, 2}}) {
    CAPTURE(order[3]);
    std::vector<int> dst(120, -1);
    tpx::kernels::permute_into<int> f;
    f.src = src.data();
    f.dst = dst.data();
    f.ndims = 4;
    for (int d = 0; d < 4; ++d) {
      f.extent[d] = src_extent[order[d]];
      f.src_stride[d] = src_stride[order[d]];
    }
    CHECK(f.keeps_last_dim() == (order[3] == 3));
    const std::int64_t cols = f.extent[3], rows = 120 / cols;
    std::size_t wrong_starts = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      // dst's coordinates of row r, then src's offset of them, the long way
      const std::int64_t coordinate[3] = {r / (f.extent[1] * f.extent[2]), r / f.extent[2] % f.extent[1],
                                          r % f.extent[2]};
      std::int64_t want = 0;
      for (int d = 0; d < 3; ++d) want += coordinate[d] * src_stride[order[d]];
      wrong_starts += f.source_of_row(r) != want;
      for (std::int64_t c = 0; c < cols; ++c) f(r, c);
    }
    CHECK(wrong_starts == 0);
    std::size_t wrong = 0;
    for (std::int64_t i = 0; i < 120; ++i) {  // dst element i at src's coordinates
      std::int64_t at = 0, rest = i;
      for (int d = 3; d >= 0; --d) {
        at += rest % f.extent[d] * src_stride[order[d]];
        rest /= f.extent[d];
      }
      wrong += dst[i] != src[at];
    }
    CHECK(wrong == 0);
  }
}

// The host's copy (copy_rows: each row's source carried on from the last one's) against the
// naive mapping of every element, for every order of four dims (one of extent 1) and for blocks
// of one and two dims.
TEST_CASE("a permute's host copy puts every element where its coordinates say, in any order") {
  auto check_every_order = [](std::vector<std::int64_t> extents) {
    const int n = static_cast<int>(extents.size());
    std::vector<std::int64_t> stride(n, 1);
    for (int d = n - 1; d > 0; --d) stride[d - 1] = stride[d] * extents[d];
    const std::int64_t count = stride[0] * extents[0];
    std::vector<int> src(count);
    for (std::int64_t i = 0; i < count; ++i) src[i] = static_cast<int>(i);
    std::vector<int> order(n);
    for (int d = 0; d < n; ++d) order[d] = d;
    do {
      CAPTURE(n);
      CAPTURE(order[0]);
      CAPTURE(order[n - 1]);
      std::vector<int> dst(count, -1);
      const auto f = tpx::kernels::permute_into<int>::of(src.data(), extents.data(), n,
                                                         order.data(), dst.data());
      f.copy_rows(count / f.extent[n - 1]);
      std::size_t wrong = 0;
      for (std::int64_t i = 0; i < count; ++i) {  // dst element i at src's coordinates
        std::int64_t at = 0, rest = i;
        for (int d = n - 1; d >= 0; --d) {
          at += rest % f.extent[d] * stride[order[d]];
          rest /= f.extent[d];
        }
        wrong += dst[i] != src[at];
      }
      CHECK(wrong == 0);
    } while (std::next_permutation(order.begin(), order.end()));
  };
  check_every_order({2, 3, 1, 5});
  check_every_order({7});
  check_every_order({4, 6});
  check_every_order({3, 1, 2, 2, 3});
}

// Every thread's walk of a grid-stride loop (first index, stride) over grids of a few widths,
// strides under, at and over a row, and over several rows at once.
TEST_CASE("grid_walk visits the rows and columns that dividing each index gives") {
  std::size_t steps = 0, wrong = 0;
  for (const std::int64_t cols : {1, 3, 7, 64})
    for (const std::int64_t stride : {1, 5, 64, 1000})
      for (const std::int64_t first : {0, 2, 63, 999}) {
        const std::int64_t n = 50 * cols + 3;
        for (tpx::kernels::grid_walk walk(first, stride, cols); walk.flat < n; walk.advance(), ++steps)
          wrong += walk.row != walk.flat / cols || walk.column != walk.flat % cols;
      }
  CHECK(steps > 1000);
  CHECK(wrong == 0);
}

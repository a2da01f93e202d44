// Tests of the host GEMM (kernels/gemm_host.hpp) against a naive triple loop in double, and of
// the OpenBLAS thread control (kernels/blas_threads.hpp).
//
// Every case stores its matrices with row strides larger than needed and fills the padding with
// NaN (A, B) or a sentinel (C): a GEMM that read the padding would produce NaN, and one that
// wrote it would change the sentinel. Tolerances, elementwise, with |A||B| the product of the
// absolute values (the scale of the classical error bound k * 2^-24 * |A||B|):
//   fp32: |C - ref| <= 1e-5 * (|alpha| |A||B| + |beta| |C0|)      (k <= 160 here)
//   bf16: |C - ref| <= 2^-8 |ref| + 2e-5 * (|alpha| |A||B| + |beta| |C0|)
// where ref is computed in double from the very values stored (bf16 inputs are exact in double),
// and 2^-8 is the relative error of the single rounding of the fp32 result to bf16.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

#include "tpx/core/bfloat16.hpp"
#include "tpx/kernels/blas_threads.hpp"
#include "tpx/kernels/gemm_host.hpp"

namespace {

using tpx::bf16;
using std::int64_t;

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float c_sentinel = 4096.0f;  // exact in bf16

// A rows x cols row-major matrix stored with row stride ld = cols + pad; padding holds `padding`.
template <class T>
struct Padded {
  int64_t rows, cols, ld;
  std::vector<T> data;

  Padded(int64_t r, int64_t c, int64_t pad, float padding, std::mt19937& rng)
      : rows(r), cols(c), ld(c + pad), data(static_cast<std::size_t>(r * (c + pad)), T(padding)) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) at(i, j) = T(dist(rng));
  }
  T& at(int64_t i, int64_t j) { return data[static_cast<std::size_t>(i * ld + j)]; }
  double get(int64_t i, int64_t j) const { return static_cast<float>(data[static_cast<std::size_t>(i * ld + j)]); }
};

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;
};

// Runs one case for T and checks every element of C, and that C's padding is untouched.
template <class T>
void check_case(const Case& cs) {
  CAPTURE(cs.trans_a);
  CAPTURE(cs.trans_b);
  CAPTURE(cs.m);
  CAPTURE(cs.n);
  CAPTURE(cs.k);
  CAPTURE(cs.beta);
  CAPTURE(cs.pad);
  std::mt19937 rng(static_cast<unsigned>(cs.m * 10007 + cs.n * 101 + cs.k));
  Padded<T> a(cs.trans_a ? cs.k : cs.m, cs.trans_a ? cs.m : cs.k, cs.pad, nan_f, rng);
  Padded<T> b(cs.trans_b ? cs.n : cs.k, cs.trans_b ? cs.k : cs.n, cs.pad, nan_f, rng);
  Padded<T> c(cs.m, cs.n, cs.pad, c_sentinel, rng);
  if (cs.beta == 0.0f) {
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < cs.n; ++j) c.at(i, j) = T(nan_f);  // beta == 0: C's old values are ignored
  }
  const Padded<T> c0 = c;
  auto op_a = [&](int64_t i, int64_t p) { return cs.trans_a ? a.get(p, i) : a.get(i, p); };
  auto op_b = [&](int64_t p, int64_t j) { return cs.trans_b ? b.get(j, p) : b.get(p, j); };

  tpx::kernels::gemm(cs.trans_a, cs.trans_b, cs.m, cs.n, cs.k, cs.alpha, a.data.data(), a.ld, b.data.data(), b.ld,
                     cs.beta, c.data.data(), c.ld);

  const double rounding = std::is_same_v<T, bf16> ? std::ldexp(1.0, -8) : 0.0;
  const double accumulation = std::is_same_v<T, bf16> ? 2e-5 : 1e-5;
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < cs.n; ++j) {
      double dot = 0.0, magnitude = 0.0;
      for (int64_t p = 0; p < cs.k; ++p) {
        dot += op_a(i, p) * op_b(p, j);
        magnitude += std::abs(op_a(i, p) * op_b(p, j));
      }
      const double old = cs.beta == 0.0f ? 0.0 : c0.get(i, j);
      const double ref = cs.alpha * dot + cs.beta * old;
      const double bound =
          rounding * std::abs(ref) + accumulation * (std::abs(cs.alpha) * magnitude + std::abs(cs.beta * old));
      CAPTURE(i);
      CAPTURE(j);
      REQUIRE(std::abs(c.get(i, j) - ref) <= bound);
    }
    for (int64_t j = cs.n; j < c.ld; ++j) REQUIRE(c.get(i, j) == c_sentinel);
  }
}

struct Size {
  int64_t m, n, k;
};
constexpr Size sizes[] = {{7, 5, 3}, {1, 1, 1}, {17, 13, 31}, {64, 33, 65}, {3, 130, 150}};

template <class T>
void check_all_cases() {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (const Size& s : sizes) {
        check_case<T>({ta, tb, s.m, s.n, s.k, 1.0f, 0.0f, 0});    // tight strides
        check_case<T>({ta, tb, s.m, s.n, s.k, 1.5f, 0.0f, 3});    // padded strides, C write-only
        check_case<T>({ta, tb, s.m, s.n, s.k, -0.75f, 0.5f, 2});  // accumulate into C
      }
    }
  }
}

// Empty products: with m == 0 or n == 0 nothing is touched; with k == 0, C = beta * C.
template <class T>
void check_empty_cases() {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      check_case<T>({ta, tb, 0, 5, 3, 1.0f, 0.5f, 1});
      check_case<T>({ta, tb, 4, 0, 3, 1.0f, 0.5f, 1});
      check_case<T>({ta, tb, 4, 5, 0, 1.0f, 0.5f, 1});  // C = 0.5 * C
      check_case<T>({ta, tb, 4, 5, 0, 1.0f, 0.0f, 1});  // C = 0, even from NaN
    }
  }
}

}  // namespace

TEST_CASE("gemm fp32: every transpose combination, odd sizes, padded strides, beta") { check_all_cases<float>(); }

TEST_CASE("gemm bf16: fp32 accumulation, one rounding of the output") { check_all_cases<bf16>(); }

TEST_CASE("gemm with m, n or k == 0") {
  check_empty_cases<float>();
  check_empty_cases<bf16>();
}

TEST_CASE("gemm rejects strides smaller than the matrix and sizes beyond BLAS's int") {
  std::vector<float> a(12), b(12), c(12);
  using tpx::kernels::gemm;
  CHECK_THROWS_AS(gemm(false, false, 3, 4, 2, 1.0f, a.data(), 1, b.data(), 4, 0.0f, c.data(), 4), std::invalid_argument);
  CHECK_THROWS_AS(gemm(true, false, 3, 4, 2, 1.0f, a.data(), 2, b.data(), 4, 0.0f, c.data(), 4), std::invalid_argument);
  CHECK_THROWS_AS(gemm(false, true, 3, 4, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, c.data(), 4), std::invalid_argument);
  CHECK_THROWS_AS(gemm(false, false, 3, 4, 2, 1.0f, a.data(), 2, b.data(), 4, 0.0f, c.data(), 3), std::invalid_argument);
  CHECK_THROWS_AS(gemm(false, false, -1, 4, 2, 1.0f, a.data(), 2, b.data(), 4, 0.0f, c.data(), 4), std::invalid_argument);
  CHECK_THROWS_AS(gemm(false, false, int64_t{1} << 31, 4, 2, 1.0f, a.data(), 2, b.data(), 4, 0.0f, c.data(), 4),
                  std::invalid_argument);
  CHECK_NOTHROW(gemm(false, false, 3, 4, 2, 1.0f, a.data(), 2, b.data(), 4, 0.0f, c.data(), 4));
}

TEST_CASE("set_blas_threads(1): one thread per call, and concurrent calls from rank threads agree") {
  const int before = tpx::kernels::blas_threads();
  tpx::kernels::set_blas_threads(1);
  CHECK(tpx::kernels::blas_threads() == 1);
  CHECK_THROWS_AS(tpx::kernels::set_blas_threads(0), std::invalid_argument);

  // Four "ranks" multiply the same 96x96 matrices at once; each must get the serial result.
  constexpr int64_t n = 96;
  std::vector<float> a(n * n), b(n * n), expected(n * n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& x : a) x = dist(rng);
  for (auto& x : b) x = dist(rng);
  tpx::kernels::gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, expected.data(), n);
  std::vector<std::vector<float>> results(4, std::vector<float>(n * n));
  std::vector<std::thread> ranks;
  for (auto& r : results) {
    ranks.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep) tpx::kernels::gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, r.data(), n);
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& r : results) CHECK(r == expected);  // same code path, same thread count: same bits

  tpx::kernels::set_blas_threads(before);
  CHECK(tpx::kernels::blas_threads() == before);
}

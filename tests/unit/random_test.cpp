// Tests of the counter-based generator (kernels/random.hpp): Philox4x32-10 against the published
// known-answer vectors, the property tpx relies on (a value depends only on seed and global index,
// so a sharded fill equals the unsharded one), and the distributions.
//
// Statistical bounds are 5 standard errors of the statistic over the sample (n = 1e5), so a
// correct generator fails with probability ~1e-6 per check; the seeds are fixed, so every run
// draws the same numbers and the tests are deterministic.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tpx/kernels/random.hpp"

namespace {

namespace k = tpx::kernels;
using std::uint32_t;
using std::uint64_t;

constexpr uint64_t n_samples = 100'000;
const double five_se = 5.0 / std::sqrt(static_cast<double>(n_samples));  // 5 / sqrt(n)

struct Moments {
  double mean, variance, skewness, kurtosis;
};

Moments moments(const std::vector<double>& x) {
  double mean = 0.0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  double m2 = 0.0, m3 = 0.0, m4 = 0.0;
  for (double v : x) {
    const double d = v - mean;
    m2 += d * d, m3 += d * d * d, m4 += d * d * d * d;
  }
  const double n = static_cast<double>(x.size());
  m2 /= n, m3 /= n, m4 /= n;
  return {mean, m2, m3 / std::pow(m2, 1.5), m4 / (m2 * m2)};
}

template <class F>
std::vector<double> draw(uint64_t seed, F f) {
  std::vector<double> x;
  for (uint64_t i = 0; i < n_samples; ++i) x.push_back(f(seed, i));
  return x;
}

}  // namespace

TEST_CASE("Philox4x32-10 reproduces the Random123 known-answer vectors") {
  // From Random123's kat_vectors: counter (4 words), key (2 words) -> output (4 words).
  struct Kat {
    k::philox_words ctr;
    uint32_t key0, key1;
    k::philox_words expected;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& kat : kats) {
    const k::philox_words out = k::philox4x32_10(kat.ctr, kat.key0, kat.key1);
    for (int i = 0; i < 4; ++i) CHECK(out.w[i] == kat.expected.w[i]);
  }
  static_assert(k::philox4x32_10({{0, 0, 0, 0}}, 0, 0).w[0] == 0x6627e8d5u, "Philox must be usable at compile time");
}

TEST_CASE("a value depends only on (seed, global index): a sharded fill equals the unsharded one") {
  constexpr uint64_t seed = 0x5eed'0000'0001ull, n = 1000;
  std::vector<float> whole(n);
  for (uint64_t i = 0; i < n; ++i) whole[i] = k::normal_at(seed, i);

  // Three "ranks" holding uneven contiguous shards, filled back to front.
  const uint64_t starts[] = {0, 401, 777, n};
  std::vector<float> sharded(n);
  for (int rank = 2; rank >= 0; --rank) {
    for (uint64_t i = starts[rank + 1]; i-- > starts[rank];) sharded[i] = k::normal_at(seed, i);
  }
  CHECK(sharded == whole);
  CHECK(k::uniform_at(seed, 123) == k::uniform_at(seed, 123));
  CHECK(k::normal_at(seed, uint64_t{1} << 40) == k::normal_at(seed, uint64_t{1} << 40));
}

TEST_CASE("different seeds, and indices differing only in their high 32 bits, give different streams") {
  const uint64_t seeds[] = {1, 2, 1 + (uint64_t{1} << 32)};  // the last differs from 1 in the key's high word only
  for (uint64_t a : seeds) {
    for (uint64_t b : seeds) {
      if (a == b) continue;
      int equal = 0;
      for (uint64_t i = 0; i < 10'000; ++i) equal += k::uniform_at(a, i) == k::uniform_at(b, i);
      CHECK(equal <= 2);  // on a grid of 2^24 values, 1e4 independent pairs coincide 0.0006 times on average
    }
  }
  int equal = 0;
  for (uint64_t i = 0; i < 10'000; ++i) equal += k::uniform_at(7, i) == k::uniform_at(7, i + (uint64_t{1} << 32));
  CHECK(equal <= 2);
}

TEST_CASE("uniform_at: in [0, 1) on the 2^-24 grid, mean 1/2, variance 1/12, flat histogram") {
  const std::vector<double> x = draw(42, [](uint64_t s, uint64_t i) { return k::uniform_at(s, i); });
  for (double v : x) {
    REQUIRE(v >= 0.0);
    REQUIRE(v < 1.0);
    REQUIRE(std::ldexp(v, 24) == std::floor(std::ldexp(v, 24)));
  }
  const Moments m = moments(x);
  CHECK(std::abs(m.mean - 0.5) <= five_se * std::sqrt(1.0 / 12.0));                     // sd of U is sqrt(1/12)
  CHECK(std::abs(m.variance - 1.0 / 12.0) <= five_se * std::sqrt(1.0 / 80 - 1.0 / 144));  // sd of (U - 1/2)^2

  // 100 bins of expected count 1000 each; binomial sd sqrt(1000 * 0.99) ~= 31.5.
  std::vector<int> bins(100);
  for (double v : x) ++bins[static_cast<std::size_t>(v * 100)];
  for (int count : bins) CHECK(std::abs(count - 1000) <= 5 * 31.5);
}

TEST_CASE("normal_at: mean 0, variance 1, the shape of a Gaussian, no correlation between neighbours") {
  const std::vector<double> z = draw(2024, [](uint64_t s, uint64_t i) { return k::normal_at(s, i); });
  const Moments m = moments(z);
  CHECK(std::abs(m.mean) <= five_se);                          // sd of Z is 1
  CHECK(std::abs(m.variance - 1.0) <= five_se * std::sqrt(2.0));  // sd of Z^2 is sqrt(2)
  CHECK(std::abs(m.skewness) <= five_se * std::sqrt(6.0));        // asymptotic sd of the sample skewness
  CHECK(std::abs(m.kurtosis - 3.0) <= five_se * std::sqrt(24.0));  // and of the sample kurtosis

  const double within_one = static_cast<double>(std::count_if(z.begin(), z.end(), [](double v) { return std::abs(v) < 1.0; }));
  const double p = 0.6826894921370859;  // P(|Z| < 1)
  CHECK(std::abs(within_one / n_samples - p) <= five_se * std::sqrt(p * (1 - p)));

  double lag1 = 0.0;  // correlation of z_i and z_{i+1}: adjacent counters must look independent
  for (std::size_t i = 0; i + 1 < z.size(); ++i) lag1 += z[i] * z[i + 1];
  CHECK(std::abs(lag1 / static_cast<double>(z.size() - 1)) <= five_se);

  const double largest = std::sqrt(48.0 * std::log(2.0));  // Box-Muller with u1 >= 2^-24
  for (double v : z) REQUIRE(std::abs(v) <= largest * (1 + 1e-6));
}

// Tests of the host loops every host_space function runs on (kernels/host_loop.hpp) and of the
// host buffers (tensor/host_buffer.hpp): for_each_index visits each index exactly once whatever n
// is (blocks of 16, then the rest), fold_in_lanes is its documented 16-lane order bit for bit,
// and a host buffer is zero-filled or left for overwriting as asked. Each loop is checked both as
// for_each_index / fold_in_lanes (the AVX2 + FMA version on a machine that has it) and as the
// portable loop, so both compiled forms are covered on any x86-64 machine.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tpx/kernels/host_loop.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/tensor/host_buffer.hpp"

namespace {

namespace k = tpx::kernels;
using std::int64_t;

const int64_t sizes[] = {0, 1, 2, 15, 16, 17, 31, 32, 33, 100, 1000};

std::vector<float> random_floats(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// The fold of fold_in_lanes, written out: element i into lane i % 16, then the lanes in order.
template <class R>
typename R::value_type lane_order_fold(const std::vector<float>& x) {
  typename R::value_type lane[16];
  for (auto& l : lane) l = R::identity();
  for (std::size_t i = 0; i < x.size(); ++i)
    lane[i % 16] = R::combine(lane[i % 16], R::element(x[i]));
  typename R::value_type total = lane[0];
  for (int l = 1; l < 16; ++l) total = R::combine(total, lane[l]);
  return total;
}

}  // namespace

TEST_CASE("for_each_index visits every index of [0, n) once, for every n") {
  for (const int64_t n : sizes) {
    CAPTURE(n);
    std::vector<int> visits(static_cast<std::size_t>(n) + 1, 0);  // one past the end stays 0
    int* v = visits.data();
    k::for_each_index(n, [=](int64_t i) { ++v[i]; });
    k::host_loop_detail::blocks_then_rest(n, [=](int64_t i) { ++v[i]; });
    for (int64_t i = 0; i < n; ++i) CHECK(visits[static_cast<std::size_t>(i)] == 2);
    CHECK(visits.back() == 0);
  }
}

TEST_CASE("for_each_index in place: out may be the input") {
  std::vector<float> x = random_floats(1000, 1);
  const std::vector<float> before = x;
  float* p = x.data();
  k::for_each_index(1000, [=](int64_t i) { p[i] = 2.0f * p[i] + 1.0f; });
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(x[i] == 2.0f * before[i] + 1.0f);
}

TEST_CASE("fold_in_lanes: the 16-lane order, bit for bit, for sums, maxima and double sums") {
  using sum = k::sum_reducer<float>;
  using max = k::max_reducer<float>;
  using squares = k::sum_of_squares_reducer<double>;
  for (const int64_t n : sizes) {
    CAPTURE(n);
    const std::vector<float> x = random_floats(n, 2 + static_cast<unsigned>(n));
    const float* p = x.data();
    const auto sum_term = [=](int64_t i) { return sum::element(p[i]); };
    const auto max_term = [=](int64_t i) { return max::element(p[i]); };
    const auto squares_term = [=](int64_t i) { return squares::element(p[i]); };
    CHECK(k::fold_in_lanes<sum>(n, sum_term) == lane_order_fold<sum>(x));
    CHECK(k::host_loop_detail::lanes_then_rest<sum>(n, sum_term) == lane_order_fold<sum>(x));
    CHECK(k::fold_in_lanes<max>(n, max_term) == lane_order_fold<max>(x));
    CHECK(k::host_loop_detail::lanes_then_rest<max>(n, max_term) == lane_order_fold<max>(x));
    CHECK(k::fold_in_lanes<squares>(n, squares_term) == lane_order_fold<squares>(x));
  }
  // An empty range is the identity; a NaN anywhere makes the maximum NaN.
  CHECK(k::fold_in_lanes<max>(0, [](int64_t) { return 0.0f; }) ==
        -std::numeric_limits<float>::infinity());
  std::vector<float> x = random_floats(100, 9);
  for (const std::size_t where : {std::size_t{0}, std::size_t{37}, std::size_t{99}}) {
    std::vector<float> y = x;
    y[where] = std::numeric_limits<float>::quiet_NaN();
    const float* p = y.data();
    CHECK(std::isnan(k::fold_in_lanes<max>(100, [=](int64_t i) { return p[i]; })));
  }
}

TEST_CASE("host_buffer: zero-filled when asked, sized either way, a std::vector otherwise") {
  const tpx::host_buffer<float> zeros(1000, 0.0f);
  for (const float v : zeros) CHECK(v == 0.0f);
  tpx::host_buffer<float> for_overwrite(1000);
  CHECK(for_overwrite.size() == 1000);
  for (std::size_t i = 0; i < for_overwrite.size(); ++i) for_overwrite[i] = static_cast<float>(i);
  const tpx::host_buffer<float> copy = for_overwrite;
  CHECK(copy == for_overwrite);
  const tpx::host_buffer<float> ones(3, 1.0f);
  CHECK(ones == tpx::host_buffer<float>{1.0f, 1.0f, 1.0f});
}

// The double-precision references of the attention tests (tests/unit/attention_test.cpp,
// grouped_attention_test.cpp): inputs drawn from a seeded normal and rounded to fp32 (so the
// layers under test see exactly the reference's values), gradients of sum(out * dout) by central
// differences of a forward written in double (differentiate_attention: of q, k and v at once) (so a
// backward pass is checked against the definition, not against its own formulas restated), and the
// elementwise comparison both use.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <tpx/kernels/random.hpp>
#include <utility>
#include <vector>

namespace tpx::testing {

// n draws of a standard normal, rounded to fp32, as doubles.
inline std::vector<double> normal_values(std::int64_t n, std::uint64_t seed) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(tpx::kernels::normal_at(seed, static_cast<std::uint64_t>(i)));
  return v;
}
inline std::vector<float> as_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// d(sum(out * dout))/d(x) for each element of x (one of a layer's inputs), out = forward(x), by
// central differences with step 1e-6 (exact to about 1e-8 for the tests' smooth forwards).
template <class Forward>
std::vector<double> numeric_gradient(std::vector<double> x, const std::vector<double>& dout,
                                     const Forward& forward) {
  std::vector<double> g(x.size());
  const double h = 1e-6;
  auto loss = [&] {
    const auto out = forward(x);
    double l = 0;
    for (std::size_t i = 0; i < out.size(); ++i) l += out[i] * dout[i];
    return l;
  };
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// An attention layer's reference: its inputs q, k, v and the output gradient dout, its output
// out = forward(q, k, v) and the gradients of sum(out * dout) by central differences.
struct differentiated_attention {
  std::vector<double> q, k, v, dout, out, dq, dk, dv;
};
template <class Forward>
differentiated_attention differentiate_attention(const Forward& forward, std::vector<double> q,
                                                 std::vector<double> k, std::vector<double> v,
                                                 std::vector<double> dout) {
  differentiated_attention r{std::move(q), std::move(k), std::move(v), std::move(dout),
                             {},           {},           {},           {}};
  r.out = forward(r.q, r.k, r.v);
  r.dq = numeric_gradient(r.q, r.dout, [&](const auto& x) { return forward(x, r.k, r.v); });
  r.dk = numeric_gradient(r.k, r.dout, [&](const auto& x) { return forward(r.q, x, r.v); });
  r.dv = numeric_gradient(r.v, r.dout, [&](const auto& x) { return forward(r.q, r.k, x); });
  return r;
}

// |got - want| <= absolute + relative |want| for every element; names the count beyond and the
// worst difference.
inline void check_close(const std::vector<float>& got, const std::vector<double>& want,
                        double absolute, const char* what, double relative = 0) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    worst = std::max(worst, err);
    if (!(err <= absolute + relative * std::abs(want[i]))) ++bad;
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements beyond " << absolute << " + "
            << relative << " |want| (worst " << worst << ")");
  CHECK(bad == 0);
}

}  // namespace tpx::testing

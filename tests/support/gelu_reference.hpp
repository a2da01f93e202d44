// GELU's tanh form and its derivative in double, written out from the formula (not through
// kernels::gelu, whose exp form the host and the GPU share): the references of the tests that
// check layers and pipelines built on it.
#pragma once

#include <cmath>

namespace tpx::testing {

inline constexpr double gelu_root_2_over_pi = 0.7978845608028654, gelu_cubic = 0.044715;

inline double gelu_reference(double x) {
  return 0.5 * x * (1 + std::tanh(gelu_root_2_over_pi * (x + gelu_cubic * x * x * x)));
}

inline double gelu_reference_slope(double x) {
  const double t = std::tanh(gelu_root_2_over_pi * (x + gelu_cubic * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * gelu_root_2_over_pi * (1 + 3 * gelu_cubic * x * x);
}

}  // namespace tpx::testing

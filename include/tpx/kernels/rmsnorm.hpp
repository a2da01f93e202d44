// RMSNorm of one row, forward and backward, callable from host and device code alike.
//
// For a row x[0, d) and a learned weight w[0, d) (as in LLaMA):
//   r   = 1 / sqrt(mean_i x_i^2 + eps)          (the forward returns r; the backward needs it)
//   y_i = x_i * r * w_i
// Backward, given dy:
//   dx_j  = r * (w_j dy_j - x_j * r^2 * (1/d) sum_i w_i dy_i x_i)
//   dw_j += dy_j * x_j * r                       (accumulated: the weight is shared by every row)
// All accumulation is in fp32, as on the GPU. x, y, dy, dx share a storage type T (float or
// bf16); the weight has its own type W; the weight gradient is always accumulated in fp32.
#pragma once

#include <math.h>  // sqrtf

#include <cstdint>

#include "tpx/core/bfloat16.hpp"
#include "tpx/core/config.hpp"
#include "tpx/kernels/reduction.hpp"

namespace tpx::kernels {

// y = rmsnorm(x) * weight over one row of d values; returns r = 1/rms, to be saved for backward.
// y may be x (in place).
template <class T, class W>
TPX_HOST_DEVICE float rmsnorm_forward_row(std::int64_t d, const T* x, const W* weight, float eps, T* y) {
  const float mean_square = reduce(d, x, sum_of_squares_reducer<float>{}) / static_cast<float>(d);
  const float r = 1.0f / sqrtf(mean_square + eps);
  for (std::int64_t i = 0; i < d; ++i) {
    y[i] = static_cast<T>(static_cast<float>(x[i]) * r * static_cast<float>(weight[i]));
  }
  return r;
}

// dx (overwritten) and dweight (accumulated into) from dy, the input row x and the saved r.
template <class T, class W>
TPX_HOST_DEVICE void rmsnorm_backward_row(std::int64_t d, const T* x, const W* weight, float r, const T* dy,
                                          T* dx, float* dweight) {
  float weighted_dot = 0.0f;  // sum_i w_i dy_i x_i
  for (std::int64_t i = 0; i < d; ++i) {
    weighted_dot += static_cast<float>(weight[i]) * static_cast<float>(dy[i]) * static_cast<float>(x[i]);
  }
  const float c = weighted_dot * r * r / static_cast<float>(d);
  for (std::int64_t j = 0; j < d; ++j) {
    const float xj = static_cast<float>(x[j]), dyj = static_cast<float>(dy[j]);
    dweight[j] += dyj * xj * r;
    dx[j] = static_cast<T>(r * (static_cast<float>(weight[j]) * dyj - xj * c));
  }
}

}  // namespace tpx::kernels

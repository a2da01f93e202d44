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

// The pieces of the two row functions below, for kernels that split a row across threads (or a
// sharded row across ranks): reduce the per-element terms over the row however is convenient,
// then finish with the row's sum. The row functions are these pieces in a serial loop.

// r = 1 / sqrt(sum_i x_i^2 / d + eps), from the row's sum of squares.
TPX_HOST_DEVICE inline float rmsnorm_inverse_rms(float sum_of_squares, std::int64_t d, float eps) {
  return 1.0f / sqrtf(sum_of_squares / static_cast<float>(d) + eps);
}

// y_i = x_i * r * w_i
TPX_HOST_DEVICE inline float rmsnorm_output(float x, float r, float w) { return x * r * w; }

// The term of element i in the backward's row sum: w_i dy_i x_i.
TPX_HOST_DEVICE inline float rmsnorm_backward_term(float x, float w, float dy) { return w * dy * x; }

// dx_j = r * (w_j dy_j - x_j c), with c = r^2 / d * sum_i w_i dy_i x_i (rmsnorm_backward_scale).
TPX_HOST_DEVICE inline float rmsnorm_backward_scale(float term_sum, float r, std::int64_t d) {
  return term_sum * r * r / static_cast<float>(d);
}
TPX_HOST_DEVICE inline float rmsnorm_input_gradient(float x, float w, float dy, float r, float c) {
  return r * (w * dy - x * c);
}

// What element j adds to dweight_j: dy_j x_j r.
TPX_HOST_DEVICE inline float rmsnorm_weight_gradient(float x, float dy, float r) { return dy * x * r; }

// y = rmsnorm(x) * weight over one row of d values; returns r = 1/rms, to be saved for backward.
// y may be x (in place).
template <class T, class W>
TPX_HOST_DEVICE float rmsnorm_forward_row(std::int64_t d, const T* x, const W* weight, float eps, T* y) {
  const float r = rmsnorm_inverse_rms(reduce(d, x, sum_of_squares_reducer<float>{}), d, eps);
  for (std::int64_t i = 0; i < d; ++i) {
    y[i] = static_cast<T>(rmsnorm_output(static_cast<float>(x[i]), r, static_cast<float>(weight[i])));
  }
  return r;
}

// dx (overwritten) and dweight (accumulated into) from dy, the input row x and the saved r.
template <class T, class W>
TPX_HOST_DEVICE void rmsnorm_backward_row(std::int64_t d, const T* x, const W* weight, float r, const T* dy,
                                          T* dx, float* dweight) {
  float weighted_dot = 0.0f;  // sum_i w_i dy_i x_i
  for (std::int64_t i = 0; i < d; ++i) {
    weighted_dot += rmsnorm_backward_term(static_cast<float>(x[i]), static_cast<float>(weight[i]),
                                          static_cast<float>(dy[i]));
  }
  const float c = rmsnorm_backward_scale(weighted_dot, r, d);
  for (std::int64_t j = 0; j < d; ++j) {
    const float xj = static_cast<float>(x[j]), dyj = static_cast<float>(dy[j]);
    dweight[j] += rmsnorm_weight_gradient(xj, dyj, r);
    dx[j] = static_cast<T>(rmsnorm_input_gradient(xj, static_cast<float>(weight[j]), dyj, r, c));
  }
}

}  // namespace tpx::kernels

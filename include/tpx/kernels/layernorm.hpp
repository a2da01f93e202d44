// LayerNorm of one row, forward and backward, callable from host and device code alike, with
// the pieces a row split across threads or ranks is assembled from.
//
// For a row x[0, d), a learned weight w and bias b (as in GPT-2):
//   mean = (1/d) sum_i x_i,   var = (1/d) sum_i (x_i - mean)^2,   rstd = 1 / sqrt(var + eps)
//   xhat_i = (x_i - mean) rstd,   y_i = xhat_i w_i + b_i
// Backward, given dy (the forward's mean and rstd saved):
//   dx_j  = rstd (w_j dy_j - (1/d) sum_i w_i dy_i - xhat_j (1/d) sum_i w_i dy_i xhat_i)
//   dw_j += dy_j xhat_j,   db_j += dy_j          (accumulated: every row shares w and b)
// The variance is taken around the mean in a second pass, never as E[x^2] - mean^2, which
// cancels catastrophically for rows far from zero. All accumulation is in fp32, as on the GPU;
// x, y, dy, dx share a storage type T (float or bf16), the weight and bias have their own W.
#pragma once

#include <math.h>  // sqrtf

#include <cstdint>

#include "tpx/core/bfloat16.hpp"
#include "tpx/core/config.hpp"

namespace tpx::kernels {

struct layernorm_stats {
  float mean;
  float rstd;
};

// The pieces. A kernel reduces the per-element terms over the row in any order, then finishes.

// mean = sum / d
TPX_HOST_DEVICE inline float layernorm_mean(float sum, std::int64_t d) { return sum / static_cast<float>(d); }

// The term of element i in the variance's sum: (x_i - mean)^2.
TPX_HOST_DEVICE inline float layernorm_variance_term(float x, float mean) {
  const float deviation = x - mean;
  return deviation * deviation;
}

// rstd = 1 / sqrt(sum_i (x_i - mean)^2 / d + eps)
TPX_HOST_DEVICE inline float layernorm_rstd(float variance_sum, std::int64_t d, float eps) {
  return 1.0f / sqrtf(variance_sum / static_cast<float>(d) + eps);
}

// xhat = (x - mean) rstd
TPX_HOST_DEVICE inline float layernorm_normalized(float x, layernorm_stats s) { return (x - s.mean) * s.rstd; }

// y = xhat w + b
TPX_HOST_DEVICE inline float layernorm_output(float x, layernorm_stats s, float w, float b) {
  return layernorm_normalized(x, s) * w + b;
}

// The backward's two row sums: sum_i w_i dy_i and sum_i w_i dy_i xhat_i.
struct layernorm_backward_sums {
  float w_dy;
  float w_dy_xhat;
};

// Element i's terms of those sums.
TPX_HOST_DEVICE inline layernorm_backward_sums layernorm_backward_terms(float x, float w, float dy, layernorm_stats s) {
  const float w_dy = w * dy;
  return {w_dy, w_dy * layernorm_normalized(x, s)};
}

// dx_j from the row sums.
TPX_HOST_DEVICE inline float layernorm_input_gradient(float x, float w, float dy, layernorm_stats s,
                                                      layernorm_backward_sums sums, std::int64_t d) {
  const float inv_d = 1.0f / static_cast<float>(d);
  return s.rstd * (w * dy - sums.w_dy * inv_d - layernorm_normalized(x, s) * (sums.w_dy_xhat * inv_d));
}

// What element j adds to dweight_j (dbias_j gets dy_j itself).
TPX_HOST_DEVICE inline float layernorm_weight_gradient(float x, float dy, layernorm_stats s) {
  return dy * layernorm_normalized(x, s);
}

// The row functions: the pieces in a serial loop.

// y = layernorm(x) * weight + bias over one row of d values; returns the stats for backward.
// y may be x (in place).
template <class T, class W>
TPX_HOST_DEVICE layernorm_stats layernorm_forward_row(std::int64_t d, const T* x, const W* weight, const W* bias,
                                                      float eps, T* y) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < d; ++i) sum += static_cast<float>(x[i]);
  const float mean = layernorm_mean(sum, d);
  float variance_sum = 0.0f;
  for (std::int64_t i = 0; i < d; ++i) variance_sum += layernorm_variance_term(static_cast<float>(x[i]), mean);
  const layernorm_stats s{mean, layernorm_rstd(variance_sum, d, eps)};
  for (std::int64_t i = 0; i < d; ++i)
    y[i] = static_cast<T>(layernorm_output(static_cast<float>(x[i]), s, static_cast<float>(weight[i]),
                                           static_cast<float>(bias[i])));
  return s;
}

// dx (overwritten), dweight and dbias (accumulated into) from dy, the input row and its stats.
template <class T, class W>
TPX_HOST_DEVICE void layernorm_backward_row(std::int64_t d, const T* x, const W* weight, layernorm_stats s,
                                            const T* dy, T* dx, float* dweight, float* dbias) {
  layernorm_backward_sums sums{0.0f, 0.0f};
  for (std::int64_t i = 0; i < d; ++i) {
    const layernorm_backward_sums t = layernorm_backward_terms(static_cast<float>(x[i]), static_cast<float>(weight[i]),
                                                               static_cast<float>(dy[i]), s);
    sums.w_dy += t.w_dy;
    sums.w_dy_xhat += t.w_dy_xhat;
  }
  for (std::int64_t j = 0; j < d; ++j) {
    const float xj = static_cast<float>(x[j]), dyj = static_cast<float>(dy[j]);
    dweight[j] += layernorm_weight_gradient(xj, dyj, s);
    dbias[j] += dyj;
    dx[j] = static_cast<T>(layernorm_input_gradient(xj, static_cast<float>(weight[j]), dyj, s, sums, d));
  }
}

}  // namespace tpx::kernels

// The per-element AdamW update (Loshchilov & Hutter, decoupled weight decay), as a functor the
// host loop and a CUDA kernel both run.
//
//   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
//   p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
// with g the gradient times grad_scale (the clipping factor). Parameters and moments are fp32
// (the master weights); the gradient may be stored in any type.
#pragma once

#include <cmath>

#include "tpx/core/config.hpp"

namespace tpx::kernels {

struct adamw_update {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  float bias_correction1;  // 1 - beta1^t
  float bias_correction2;  // 1 - beta2^t
  float grad_scale;

  TPX_HOST_DEVICE void operator()(float& p, float grad, float& m, float& v) const {
    const float g = grad * grad_scale;
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    const float m_hat = m / bias_correction1;
    const float v_hat = v / bias_correction2;
    p -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
  }
};

}  // namespace tpx::kernels

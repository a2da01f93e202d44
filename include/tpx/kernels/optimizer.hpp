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

  // This update at step t (counting from 1): its bias corrections 1 - beta^t. The device computes
  // them from a t in its own memory, so that a recorded step (spmd/recorded_step.hpp) replays with
  // the step number of each replay; the host computes them the same way, with powf.
  TPX_HOST_DEVICE adamw_update at_step(float t) const {
    adamw_update u = *this;
    u.bias_correction1 = 1.0f - powf(beta1, t);
    u.bias_correction2 = 1.0f - powf(beta2, t);
    return u;
  }

  // This update with the gradient further multiplied by s (the clipping factor, which the
  // device reads from its own memory, kernel by kernel).
  TPX_HOST_DEVICE adamw_update scaled_by(float s) const {
    adamw_update u = *this;
    u.grad_scale = grad_scale * s;
    return u;
  }

  // This update at step *step and scaled by *scale, each read from the memory of the space that
  // runs it where given (null: as it is): what the host loop and the CUDA kernel apply.
  TPX_HOST_DEVICE adamw_update read(const float* step, const float* scale) const {
    const adamw_update stepped = step != nullptr ? at_step(*step) : *this;
    return scale != nullptr ? stepped.scaled_by(*scale) : stepped;
  }

  TPX_HOST_DEVICE void operator()(float& p, float grad, float& m, float& v) const {
    const float g = grad * grad_scale;
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    const float m_hat = m / bias_correction1;
    const float v_hat = v / bias_correction2;
    p -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
  }
};

// clip / ||g|| when the norm ||g|| = sqrt(squared) exceeds clip > 0, else 1: the gradient scale
// of clipping by the global norm, an elementwise functor of the summed squares. A NaN norm gives
// NaN, so a diverged step shows in the weights rather than being hidden.
struct clip_factor {
  float clip;
  TPX_HOST_DEVICE float operator()(float squared) const {
    const float norm = sqrtf(squared);
    if (norm != norm) return norm;
    return clip > 0.0f && norm > clip ? clip / norm : 1.0f;
  }
};

}  // namespace tpx::kernels

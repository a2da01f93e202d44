// Per-element math: the functors behind tpx's elementwise ops and activation layers, and the
// host loop that applies them.
//
// Each functor is a small struct whose call operator is TPX_HOST_DEVICE and works on floats:
// values stored as bf16 are widened to compute_t (fp32) before the call and the result is rounded
// once when stored. The host backend applies a functor with transform() below; the CUDA backend
// launches the very same functor in a kernel, so the host tests check the arithmetic the GPU
// runs. (The two agree to a few ulps, not bit for bit: nvcc fuses a*b+c into one FMA, and the
// host's exp (vectorizable_expf.hpp) and CUDA's expf are each within 2 ulps of the exact value.)
//
// Activations come with their derivatives as separate functors taking (x, dy) and returning
// dx = dy * f'(x), which is all a backward pass needs, given the saved input x.
#pragma once

#include <math.h>  // fmaf, which nvcc provides in device code too

#include <concepts>
#include <cstdint>

#include "tpx/core/bfloat16.hpp"
#include "tpx/core/config.hpp"
#include "tpx/kernels/host_loop.hpp"
#include "tpx/kernels/vectorizable_expf.hpp"

namespace tpx::kernels {

// x itself: with transform's storing, a conversion between element types (cast).
struct identity {
  TPX_HOST_DEVICE float operator()(float x) const { return x; }
};

// x + y
struct add {
  TPX_HOST_DEVICE float operator()(float x, float y) const { return x + y; }
};

// x - y
struct sub {
  TPX_HOST_DEVICE float operator()(float x, float y) const { return x - y; }
};

// x * y
struct mul {
  TPX_HOST_DEVICE float operator()(float x, float y) const { return x * y; }
};

// a * x
struct scale {
  float a;
  TPX_HOST_DEVICE float operator()(float x) const { return a * x; }
};

// x + b
struct add_scalar {
  float b;
  TPX_HOST_DEVICE float operator()(float x) const { return x + b; }
};

// a * x + y, as one fused multiply-add (a single rounding, on the host and on the GPU alike).
struct axpy {
  float a;
  TPX_HOST_DEVICE float operator()(float x, float y) const { return fmaf(a, x, y); }
};

// x * x
struct square {
  TPX_HOST_DEVICE float operator()(float x) const { return x * x; }
};

// max(x, 0); a NaN input stays NaN, so a diverging run shows up rather than being clipped away.
struct relu {
  TPX_HOST_DEVICE float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
};

// dx = dy where x > 0, else 0 (the subgradient at 0 is taken to be 0).
struct relu_backward {
  TPX_HOST_DEVICE float operator()(float x, float dy) const { return x > 0.0f ? dy : 0.0f; }
};

// The tanh approximation of GELU used by GPT-2 (and llm.c):
//   gelu(x) = x/2 * (1 + tanh(u)),  u = s * (x + c x^3),  s = sqrt(2/pi), c = 0.044715,
// evaluated as x * p with p = (1 + tanh(u))/2 = 1 / (1 + exp(-2u)): the same function, with one
// exp instead of a tanh (cheaper on the host, where it vectorizes; the GPU's expf is a few
// instructions).
// For x far below 0, exp(-2u) overflows to inf and p to 0: gelu is -0, as it should be.
struct gelu {
  static constexpr float s = 0.7978845608028654f;  // sqrt(2 / pi)
  static constexpr float c = 0.044715f;
  // (1 + tanh(u)) / 2 at x.
  TPX_HOST_DEVICE static float half_one_plus_tanh(float x) {
    return 1.0f / (1.0f + vectorizable_expf(-2.0f * s * (x + c * x * x * x)));
  }
  TPX_HOST_DEVICE float operator()(float x) const { return x * half_one_plus_tanh(x); }
};

// dx = dy * gelu'(x) for the tanh approximation above:
//   gelu'(x) = (1 + t)/2 + x/2 * (1 - t^2) * s * (1 + 3c x^2),  t = tanh(u)
//            = p + 2 x p (1 - p) * s * (1 + 3c x^2),            p = (1 + t)/2.
struct gelu_backward {
  TPX_HOST_DEVICE float operator()(float x, float dy) const {
    const float p = gelu::half_one_plus_tanh(x);
    const float slope = p + 2.0f * x * p * (1.0f - p) * gelu::s * (1.0f + 3.0f * gelu::c * x * x);
    return dy * slope;
  }
};

// SwiGLU's gate (Shazeer 2020, "GLU Variants Improve Transformer"; Llama's MLP): with g = h W_gate
// and u = h W_up, the MLP's inner activation is silu(g) * u, silu(g) = g * sigmoid(g). Its
// backward takes dy at that product: the gate's gradient dy * u * silu'(g), with
// silu'(g) = s (1 + g (1 - s)), s = sigmoid(g), and the up projection's dy * silu(g).
// For g far below 0, exp(-g) overflows to inf and s to 0: silu is -0 and both slopes 0.
struct silu_product {
  TPX_HOST_DEVICE static float sigmoid(float g) { return 1.0f / (1.0f + vectorizable_expf(-g)); }
  TPX_HOST_DEVICE float operator()(float g, float u) const { return g * sigmoid(g) * u; }
};

// d(silu(g) * u)/dg times dy.
struct silu_product_gate_backward {
  TPX_HOST_DEVICE float operator()(float g, float u, float dy) const {
    const float s = silu_product::sigmoid(g);
    return dy * u * s * (1.0f + g * (1.0f - s));
  }
};

// d(silu(g) * u)/du times dy: dy * silu(g).
struct silu_product_up_backward {
  TPX_HOST_DEVICE float operator()(float g, float dy) const {
    return dy * g * silu_product::sigmoid(g);
  }
};

// out[i] = f(in[i]...) for i in [0, n), on the host: the inputs are widened to compute_t, f runs
// in fp32, and its result is converted to Out once. out may be one of the inputs (in place), but
// must not overlap one otherwise. The loop vectorizes when f's math does (kernels/host_loop.hpp).
template <class Out, class F, class... In>
  requires std::invocable<const F&, compute_t<In>...>
void transform(std::int64_t n, const F& f, Out* out, const In*... in) {
  for_each_index(n, [=](std::int64_t i) {
    out[i] = static_cast<Out>(f(static_cast<compute_t<In>>(in[i])...));
  });
}

}  // namespace tpx::kernels

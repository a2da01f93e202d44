// exp(x) in fp32 for the per-element math of kernels/: libm's expf on the GPU, and on the host the
// same function computed inline, so that host loops over it vectorize (kernels/host_loop.hpp).
//
// A call to glibc's expf cannot be vectorized at the flags users build with: the compiler sees
// an opaque function (glibc declares vector versions only under -ffast-math), and the loop around
// it stays scalar, one call per element. GELU and the softmax of the cross-entropy spend most of
// their host time there. The host version below is the textbook reduction exp(x) = 2^n exp(r),
// n = round(x / ln 2), r = x - n ln 2 (|r| <= ln 2 / 2, with ln 2 split in two so that n ln2_hi
// is exact), exp(r) by the degree-7 polynomial of Cephes' expf, and 2^n built in the exponent
// bits as 2^(n/2) 2^(n - n/2) so that results near overflow and in the subnormal range come out
// right. Its error is below 1.03 ulps of the exact result over the whole float range (checked
// exhaustively: every float in [-105, 90], in the AVX2 + FMA loops of kernels/host_loop.hpp;
// below 1 ulp evaluated without FMA; glibc's expf is below 0.51 ulp, CUDA's 2 ulps), so host and
// GPU still agree to a few ulps as kernels/elementwise.hpp says. exp(+inf) = +inf,
// exp(-inf) = 0, exp(NaN) = NaN, exp(x > 88.73) = +inf, exp(x < -103.98) = 0.
//
// Everything is straight-line arithmetic: |x| is clamped to 104 on its bits, as an integer (a
// float comparison with a branch would be split by the optimizer into paths that GCC then refuses
// to merge back into vector code, since fp32 operations may trap), and a NaN is put back after
// the clamp.
#pragma once

#include <math.h>  // expf, for the device

#include <algorithm>
#include <bit>
#include <cstdint>

#include "tpx/core/config.hpp"

namespace tpx::kernels {

TPX_HOST_DEVICE inline float vectorizable_expf(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  constexpr float log2e = 1.44269504088896341f;
  constexpr float ln2_hi = 0.693359375f;     // 355/512: n * ln2_hi is exact for |n| < 2^15
  constexpr float ln2_lo = -2.12194440e-4f;  // ln 2 - ln2_hi
  constexpr float round_bias = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr std::int32_t magnitude_mask = 0x7fffffff, quiet_nan = 0x7fc00000;
  // x clamped to [-104, 104], where exp is 0 or inf in fp32 at either end; NaN stays NaN.
  const std::int32_t bits = std::bit_cast<std::int32_t>(x);
  const std::int32_t magnitude =
      std::min(bits & magnitude_mask, std::bit_cast<std::int32_t>(104.0f));
  const std::int32_t nan = x != x ? quiet_nan : 0;
  x = std::bit_cast<float>((bits & ~magnitude_mask) | magnitude | nan);

  const float shifted = x * log2e + round_bias;
  const float n = shifted - round_bias;  // round(x / ln 2), in [-150, 150]
  const std::int32_t k =
      std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(round_bias);
  const float r = (x - n * ln2_hi) - n * ln2_lo;
  float p = 1.9875691500e-4f;  // exp(r) = 1 + r + r^2 (1/2 + r/6 + ...), Cephes' coefficients
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t half = k >> 1;  // 2^k = 2^half 2^(k - half), both normal floats
  const float scale_a = std::bit_cast<float>((half + 127) << 23);
  const float scale_b = std::bit_cast<float>((k - half + 127) << 23);
  return p * scale_a * scale_b;
#endif
}

}  // namespace tpx::kernels

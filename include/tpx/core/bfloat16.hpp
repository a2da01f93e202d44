// bf16: the 16-bit storage type of tpx (1 sign, 8 exponent, 7 mantissa bits: the top half of
// an IEEE fp32). tpx stores weights and activations in it on request and always computes in
// fp32: values are widened on load and rounded to nearest-even on store, the same rule as
// CUDA's __float2bfloat16_rn, so the host and CUDA backends produce the same bits for every
// number (a NaN stays a NaN; its payload bits may differ).
//
// On GPUs that have it (sm_80 and later) the rounding is the hardware's one instruction,
// cvt.rn.bf16.f32; written out in integer operations it takes about seven, and a kernel that
// stores bf16 does one per element (tensor-core attention rounds every probability it
// multiplies by V). Constant evaluation and the host use the integer form.
//
// The bit reinterpretations use __builtin_bit_cast, the builtin behind std::bit_cast (g++, clang,
// nvcc and MSVC all have it): nvcc treats std::bit_cast as a host-only function and rejects it in
// __host__ __device__ code, while the builtin is usable on both sides and stays constexpr.
#pragma once

#include <cstdint>

#include "tpx/core/config.hpp"

namespace tpx {

struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  TPX_HOST_DEVICE constexpr bf16(float f) : bits(round_to_nearest_even(f)) {}  // NOLINT: implicit like float
  TPX_HOST_DEVICE constexpr operator float() const {
    return __builtin_bit_cast(float, static_cast<std::uint32_t>(bits) << 16);
  }

  TPX_HOST_DEVICE static constexpr std::uint16_t round_to_nearest_even(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (!__builtin_is_constant_evaluated()) {
      std::uint16_t rounded;
      asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(rounded) : "f"(f));
      return rounded;
    }
#endif
    const std::uint32_t u = __builtin_bit_cast(std::uint32_t, f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
      return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // NaN stays a (quiet) NaN
    }
    const std::uint32_t lsb = (u >> 16) & 1u;
    return static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16);
  }
};

// The type arithmetic on T is carried out in: fp32 for both storage types tpx supports.
template <class T>
using compute_t = float;

}  // namespace tpx

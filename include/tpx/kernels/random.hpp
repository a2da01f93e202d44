// Counter-based random numbers: the value drawn for element i of a tensor is a pure function of
// (seed, i), where i is the element's GLOBAL index in the unsharded tensor.
//
// That is how tpx makes a sharded random initialization equal the unsharded one: each rank fills
// its shard by asking for the global indices it holds, so no rank needs to know what the others
// drew, in what order, or how the tensor is split, and a change of mesh does not change the model.
// A stateful generator (a stream advanced element by element) cannot do this.
//
// The generator is Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011), as in cuRAND's Philox4_32_10 and PyTorch's CUDA RNG: a 10-round keyed bijection of a
// 128-bit counter, which passes the BigCrush statistical tests. Here the key is the 64-bit seed
// and the counter is (index, 0); one evaluation yields four 32-bit words, of which uniform_at uses
// the first and normal_at the first two, so draws that must be independent of each other (say a
// dropout mask and an initialization) take different seeds. Philox needs only 32x32->64-bit
// multiplies, the same on host and GPU, so the raw words are identical on both; the float results
// agree to a few ulps (logf, cosf and sqrtf are not bit-identical between glibc and CUDA).
#pragma once

#include <math.h>  // logf, cosf, sqrtf

#include <cstdint>

#include "tpx/core/config.hpp"

namespace tpx::kernels {

struct philox_words {
  std::uint32_t w[4];
};

// Philox4x32 with 10 rounds of counter `ctr` under key `key` (the reference algorithm of Random123).
TPX_HOST_DEVICE constexpr philox_words philox4x32_10(philox_words ctr, std::uint32_t key0, std::uint32_t key1) {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;  // round multipliers
  constexpr std::uint32_t k0 = 0x9E3779B9u, k1 = 0xBB67AE85u;  // key schedule: golden ratio, sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += k0;
      key1 += k1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(m0) * ctr.w[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(m1) * ctr.w[2];
    ctr = {{static_cast<std::uint32_t>(p1 >> 32) ^ ctr.w[1] ^ key0, static_cast<std::uint32_t>(p1),
            static_cast<std::uint32_t>(p0 >> 32) ^ ctr.w[3] ^ key1, static_cast<std::uint32_t>(p0)}};
  }
  return ctr;
}

// The four random words of element `index` under `seed`.
TPX_HOST_DEVICE constexpr philox_words random_words_at(std::uint64_t seed, std::uint64_t index) {
  const philox_words ctr = {{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u, 0u}};
  return philox4x32_10(ctr, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// The top 24 bits of a word as a float in [0, 1): every value k * 2^-24, exactly representable.
TPX_HOST_DEVICE constexpr float unit_float(std::uint32_t word) { return static_cast<float>(word >> 8) * 0x1.0p-24f; }

// Uniform in [0, 1), on the grid k * 2^-24.
TPX_HOST_DEVICE constexpr float uniform_at(std::uint64_t seed, std::uint64_t index) {
  return unit_float(random_words_at(seed, index).w[0]);
}

// Standard normal (mean 0, variance 1), by the Box-Muller transform of two uniforms:
//   z = sqrt(-2 ln u1) * cos(2 pi u2),  u1 in (0, 1], u2 in [0, 1).
// With 24-bit uniforms |z| <= sqrt(48 ln 2) ~= 5.77: the tail beyond it (probability ~1e-8) is
// never drawn, which is immaterial for initialization and dropout.
TPX_HOST_DEVICE inline float normal_at(std::uint64_t seed, std::uint64_t index) {
  const philox_words r = random_words_at(seed, index);
  const float u1 = 1.0f - unit_float(r.w[0]);  // (0, 1]: log stays finite
  const float u2 = unit_float(r.w[1]);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958648f * u2);
}

}  // namespace tpx::kernels

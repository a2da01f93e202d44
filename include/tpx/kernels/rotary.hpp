// Rotary position embedding's math (RoFormer, Su et al. 2021; the "rotate half" layout of
// GPT-NeoX and Llama's Hugging Face port): the host/device functor that nn/rotary.hpp runs with a
// memory space's for_each_element loop, so the host tests check the arithmetic the GPU runs.
//
// A head's E elements are E/2 pairs (i, i + E/2); pair i of the row at position p turns by the
// angle p * theta_i, theta_i = base^(-2i/E):
//
//   x'[i]       = x[i] cos - x[i + E/2] sin
//   x'[i + E/2] = x[i + E/2] cos + x[i] sin
//
// so <q'_m, k'_n> depends on m - n only, which is what makes the product of a query and a key see
// their distance. The backward pass turns the gradient back by the opposite angle (a rotation's
// transpose is its inverse): the same functor with direction -1. One call handles one pair,
// reading both elements before writing either, so the rotation runs in place and no (row, pair)
// touches another's elements. Angles are computed in fp32, as PyTorch models do (Hugging Face's
// inv_freq and positions are fp32 tensors), with the full-range sinf and cosf.
#pragma once

#include <math.h>  // exp2f, sinf, cosf, which nvcc provides in device code too

#include <cstdint>

#include "tpx/core/bfloat16.hpp"
#include "tpx/core/config.hpp"

namespace tpx::kernels {

// theta_i = base^(-i / half) for pair i of half pairs, from log2(base).
TPX_HOST_DEVICE inline float rotary_frequency(std::int64_t i, std::int64_t half, float log2_base) {
  return exp2f(-static_cast<float>(i) / static_cast<float>(half) * log2_base);
}

// Turns pair `pair` of row `row` of x [rows, width] (row-major, width even) by direction *
// position * theta_pair. Rows are [..., P, inner...] flattened, P the position dim with
// `positions` local entries and inner the product of the dims after it but the last (a tensor
// [B, T, H, E] has inner = H's local extent); local entry p < split holds global position
// first_position + p, and p >= split (the second of a load-balanced block's two chunks,
// nn/sequence_order.hpp) holds second_position + p - split.
template <class T>
struct rotary_turn {
  T* x;
  std::int64_t width;
  std::int64_t inner;
  std::int64_t positions;
  std::int64_t first_position;
  std::int64_t split;  // positions, for a block of consecutive positions
  std::int64_t second_position;
  float log2_base;
  float direction;  // 1: forward; -1: the backward pass's inverse rotation

  TPX_HOST_DEVICE void operator()(std::int64_t row, std::int64_t pair) const {
    const std::int64_t half = width / 2;
    const std::int64_t p = (row / inner) % positions;
    const auto position =
        static_cast<float>(p < split ? first_position + p : second_position + (p - split));
    const float angle = position * rotary_frequency(pair, half, log2_base);
    const float cosine = cosf(angle), sine = direction * sinf(angle);
    T* const first = x + row * width + pair;
    T* const second = first + half;
    const auto a = static_cast<float>(*first), b = static_cast<float>(*second);
    *first = static_cast<T>(a * cosine - b * sine);
    *second = static_cast<T>(b * cosine + a * sine);
  }
};

}  // namespace tpx::kernels

// How text generation (generation.hpp) picks the next byte from the model's logits for it: the
// most likely byte at temperature 0 (greedy decoding), else a draw from softmax(logits / T), as
// nanoGPT's sample.py and llm.c's sampler do (without a top-k cut). The draw is the inverse of
// the distribution's cumulative sum at a given uniform number, so that a seed and the byte's index
// (tpx::kernels::uniform_at) make a run's text the same every time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpt {

// The index of the byte chosen from `logits` (one per byte value; a larger vocabulary's columns
// past 256 are never a byte and are not offered) at `temperature` >= 0, with `uniform` in
// [0, 1) the draw. Ties at temperature 0 go to the smallest index.
inline int sample_byte(std::span<const float> logits, double temperature, double uniform) {
  if (logits.empty()) throw std::invalid_argument("gpt::sample_byte: no logits");
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw std::invalid_argument("gpt::sample_byte: temperature " + std::to_string(temperature) +
                                " (expected a finite number >= 0)");
  const std::span<const float> bytes = logits.first(std::min<std::size_t>(logits.size(), 256));
  const auto most = std::max_element(bytes.begin(), bytes.end());
  if (!std::isfinite(*most))
    throw std::invalid_argument("gpt::sample_byte: the largest logit is " + std::to_string(*most));
  if (temperature == 0) return static_cast<int>(most - bytes.begin());
  // exp((l - max) / T): the largest term is 1, so the sum neither overflows nor vanishes.
  std::vector<double> cumulative(bytes.size());
  double total = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    total += std::exp((static_cast<double>(bytes[i]) - *most) / temperature);
    cumulative[i] = total;
  }
  const double target = uniform * total;
  const auto chosen = std::upper_bound(cumulative.begin(), cumulative.end(), target);
  // uniform < 1 keeps target below the total; rounding could still reach it.
  return static_cast<int>(
      std::min(chosen - cumulative.begin(), static_cast<std::ptrdiff_t>(bytes.size()) - 1));
}

}  // namespace gpt

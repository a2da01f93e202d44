// The causal softmax of attention's scores on the host, a row at a time
// (host_space::causal_softmax_rows, called by nn/attention.hpp's reference attention).
//
// The GPU runs this softmax as three grid passes of kernels/attention_terms.hpp's functors (the row
// maxima, the sums of exponentials, the probabilities), each over every (row, key) of the [rows, T]
// scores, a masked key being a select per element. On the host those passes ran scalar (the select
// of a grid functor does not vectorize at -O2, and the exponential was libm's), and visited the
// masked half of every row only to produce -inf and 0. Here row r, query position t
// (kernels::query_block::last_visible), reads only its visible keys [0, t], in the vector loops of
// kernels/host_loop.hpp with no select left in them, and fills the rest of the row with zeros. The
// math is the functors': the maximum of the scores, kernels::causal_softmax_term for each term,
// term / sum for a probability; and the folds take the same lanes in the same order (a masked key
// added -inf to a lane's maximum and 0 to its sum, which changes neither). So for finite scores the
// probabilities are the grid passes' on the host, bit for bit (tests/unit/attention_test.cpp checks
// it, with terms down to 0). One step differs: GCC fuses the exponential's last multiply, by a
// power of two, into the grid pass's lane sum, where this loop rounds the term first; the product
// is exact unless the term is subnormal (scale (x - max) below -87), and such a term changes a lane
// by less than 2^-126 of a sum that is at least 1. A row with a NaN score (or only -inf ones) is
// all NaN on its visible keys in both, and 0 on its masked keys here (NaN there). The GPU's
// probabilities differ from these by a few ulps (its expf, its order of additions).
#pragma once

#include <math.h>  // INFINITY

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tpx/kernels/attention_terms.hpp"
#include "tpx/kernels/host_loop.hpp"
#include "tpx/kernels/reduction.hpp"

namespace tpx::detail {

// The largest of a row's scores, folded with a select GCC vectorizes: kernels::max_reducer's,
// which also carries a NaN in either operand, runs scalar with GCC (its test for NaN becomes a
// branch). The maximum of non-NaN scores is the same value either way (only +0 and -0 may
// swap, whose terms exp(scale (x - max)) are the same), and a NaN score, which this fold may
// drop, is carried by the sum instead (its term is NaN): the row's visible probabilities are all
// NaN, as in the grid passes.
struct score_max {
  using value_type = float;
  static constexpr float identity() { return -INFINITY; }
  static constexpr float element(float x) { return x; }
  static constexpr float combine(float a, float b) { return !(b <= a) ? b : a; }
};

// x: rows x keys scores (q.k, unscaled), overwritten by the probabilities of the softmax of
// scale x over each row's keys s <= queries.last_visible(r) (< keys).
template <class T>
void host_causal_softmax_rows(std::int64_t rows, std::int64_t keys, kernels::query_block queries,
                              float scale, T* x) {
  if (keys <= 0) return;  // rows of no keys
  // A row's visible keys are staged in fp32 and padded with masked keys (-inf) to a multiple of
  // host_loop's block, so that every pass runs whole vector blocks: a row of T = 64 has on
  // average 32 visible keys, and a scalar remainder would take half of its time.
  constexpr std::int64_t block = kernels::host_loop_block;
  const auto whole_blocks = [](std::int64_t n) { return (n + block - 1) / block * block; };
  std::vector<float> staging(static_cast<std::size_t>(whole_blocks(keys)));
  float* const staged = staging.data();
  for (std::int64_t r = 0; r < rows; ++r) {
    T* const row = x + r * keys;
    const std::int64_t visible = queries.last_visible(r) + 1, padded = whole_blocks(visible);
    kernels::for_each_index(visible,
                            [=](std::int64_t c) { staged[c] = static_cast<float>(row[c]); });
    std::fill(staged + visible, staged + padded, -INFINITY);
    const float max =
        kernels::fold_in_lanes<score_max>(padded, [=](std::int64_t c) { return staged[c]; });
    kernels::for_each_index(padded, [=](std::int64_t c) {
      staged[c] = kernels::causal_softmax_term(scale, staged[c], max);
    });
    const float sum = kernels::fold_in_lanes<kernels::sum_reducer<float>>(
        padded, [=](std::int64_t c) { return staged[c]; });
    kernels::for_each_index(visible,
                            [=](std::int64_t c) { row[c] = static_cast<T>(staged[c] / sum); });
    std::fill(row + visible, row + keys, T(0));
  }
}

}  // namespace tpx::detail

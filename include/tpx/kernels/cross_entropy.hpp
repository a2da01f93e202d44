// Softmax and the softmax cross-entropy loss of one row of logits, forward and backward: the
// per-row math behind the trainer's loss, callable from host and device code alike.
//
// For logits x[0, n) and target class t:
//   softmax(x)_j = exp(x_j - m) / s,   m = max_j x_j,   s = sum_j exp(x_j - m)
//   loss         = log(sum_j exp(x_j)) - x_t = (m - x_t) + log(s)
//   dloss/dx_j   = softmax(x)_j - [j == t]
// Subtracting the maximum keeps every exp in (0, 1], so logits of any size are safe. The loss is
// formed as (m - x_t) + log(s), never as logsumexp - x_t: with logits near 1e4 the logsumexp is
// only known to 1e-3 in fp32, which would swamp a loss near 0.
//
// A row is summarized by its softmax_stats (m, s). The forward returns them beside the loss and
// the backward takes them back, so the backward recomputes the softmax from the logits instead of
// storing a [rows, classes] probability tensor. Stats of disjoint pieces of a row merge into the
// stats of the whole row (merge() below): this is how a loss over a vocabulary sharded across
// ranks combines per-rank partial stats. All accumulation is in fp32, as on the GPU.
#pragma once

#include <math.h>  // logf, INFINITY, NAN

#include <cstdint>

#include "tpx/core/bfloat16.hpp"
#include "tpx/core/config.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/kernels/vectorizable_expf.hpp"

namespace tpx::kernels {

// max and sum of exp(x - max) over a row, or over a piece of one. An empty piece is {-inf, 0},
// which merge() treats as its identity; so is a piece whose logits are all -inf (masked).
struct softmax_stats {
  float max;
  float sum;
};

template <class T>
TPX_HOST_DEVICE softmax_stats softmax_stats_of(std::int64_t n, const T* logits) {
  const float m = reduce(n, logits, max_reducer<float>{});
  if (m == -INFINITY) return {m, 0.0f};
  float s = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) s += vectorizable_expf(static_cast<float>(logits[j]) - m);
  return {m, s};
}

// The stats of the concatenation of two disjoint pieces of a row.
TPX_HOST_DEVICE inline softmax_stats merge(softmax_stats a, softmax_stats b) {
  if (a.max < b.max) {
    const softmax_stats larger = b;
    b = a;
    a = larger;
  }
  if (b.sum == 0.0f) return a;
  return {a.max, a.sum + b.sum * vectorizable_expf(b.max - a.max)};
}

// A piece's sum of exps taken relative to the whole row's max instead of its own:
// s exp(m_piece - m_row), 0 for an empty piece. With the row's max known (an AllReduce(max) of
// the pieces' maxima), the pieces' sums so rescaled add up to the row's sum (an AllReduce(sum)).
struct sum_relative_to_row_max {
  TPX_HOST_DEVICE float operator()(float piece_sum, float piece_max, float row_max) const {
    return piece_sum == 0.0f ? 0.0f : piece_sum * vectorizable_expf(piece_max - row_max);
  }
};

// log(sum_j exp(x_j)) of the row summarized by s.
TPX_HOST_DEVICE inline float logsumexp(softmax_stats s) { return s.max + logf(s.sum); }

// The per-element pieces of the row functions below, given the stats of the whole row: for
// kernels that split a row across threads (stats of the pieces combined with merge()), or a
// vocabulary sharded across ranks. The row functions are these pieces in a serial loop.

// softmax(x)_j = exp(x_j - m) / s
TPX_HOST_DEVICE inline float softmax_element(float x, softmax_stats row) {
  return vectorizable_expf(x - row.max) / row.sum;
}

// The loss of a row from its stats and its target's logit: (m - x_t) + log(s).
TPX_HOST_DEVICE inline float cross_entropy_loss(softmax_stats row, float target_logit) {
  return (row.max - target_logit) + logf(row.sum);
}

// dloss * (softmax(x)_j - [j is the target]). The indicator is a statement of its own: inside
// the subtraction, the compiler would fold the subtraction into both arms of the choice, a branch
// around floating-point work, which keeps host loops over this from vectorizing.
TPX_HOST_DEVICE inline float cross_entropy_gradient(float x, bool is_target, softmax_stats row, float dloss) {
  const float indicator = is_target ? 1.0f : 0.0f;
  return dloss * (softmax_element(x, row) - indicator);
}

// cross_entropy_gradient with a row's factors taken once: dloss * softmax(x)_j - [j is the
// target] dloss = exp(x_j - m) (dloss / s) - [j is the target] dloss. A row kernel forms them
// once per row and then spends one exp, one multiply and one subtraction per element, where
// cross_entropy_gradient divides per element; the two agree to an ulp or two of fp32.
struct cross_entropy_gradient_factors {
  float max;
  float scale;  // dloss / s
  float dloss;
  TPX_HOST_DEVICE static cross_entropy_gradient_factors of(softmax_stats row, float dloss) {
    return {row.max, dloss / row.sum, dloss};
  }
  TPX_HOST_DEVICE float operator()(float x, bool is_target) const {
    const float indicator = is_target ? dloss : 0.0f;  // its own statement, as above
    return vectorizable_expf(x - max) * scale - indicator;
  }
};

// probs[j] = softmax(logits)_j. probs may be logits (in place).
template <class T, class P>
TPX_HOST_DEVICE void softmax_row(std::int64_t n, const T* logits, P* probs) {
  const softmax_stats st = softmax_stats_of(n, logits);
  for (std::int64_t j = 0; j < n; ++j) probs[j] = static_cast<P>(softmax_element(static_cast<float>(logits[j]), st));
}

struct cross_entropy_forward_result {
  float loss;
  softmax_stats stats;  // hand these to cross_entropy_backward_row
};

// The loss of one row with target class `target` in [0, n); a target outside it yields a NaN loss.
template <class T>
TPX_HOST_DEVICE cross_entropy_forward_result cross_entropy_forward_row(std::int64_t n, const T* logits,
                                                                       std::int64_t target) {
  const softmax_stats st = softmax_stats_of(n, logits);
  if (target < 0 || target >= n) return {NAN, st};
  return {cross_entropy_loss(st, static_cast<float>(logits[target])), st};
}

// dlogits[j] = dloss * (softmax(logits)_j - [j == target]), given the stats the forward returned.
// dlogits is overwritten and may be logits (in place).
template <class T, class G>
TPX_HOST_DEVICE void cross_entropy_backward_row(std::int64_t n, const T* logits, std::int64_t target,
                                                softmax_stats stats, float dloss, G* dlogits) {
  for (std::int64_t j = 0; j < n; ++j)
    dlogits[j] = static_cast<G>(cross_entropy_gradient(static_cast<float>(logits[j]), j == target, stats, dloss));
}

}  // namespace tpx::kernels

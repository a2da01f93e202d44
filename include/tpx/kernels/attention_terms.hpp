// The per-element math of causal softmax attention (nn/attention.hpp) as grid functors of (r, c):
// row r of the scores [batch..., T, S] flattened to [rows, S], column c a key position. A memory
// space runs them with its grid loops (reduce_rows, for_each_element), so the host and the GPU
// share one definition, as for grid_terms.hpp. The host runs the softmax a row at a time instead,
// over the visible keys only, with the same expressions (tensor/host_causal_softmax.hpp).
//
// Row r is query position t = first + r % Tq (first + r / G % Tq for grouped-query attention's
// [batch..., T, G, S], kernels::query_block), where the rank holds the block of Tq queries
// [first, first + Tq) of each sequence (all T of them, first = 0, unless the query sequence is
// split: context parallelism); key s = c of the whole sequence is visible when s <= t. With
// scores x = q.k (unscaled) and scale = 1/sqrt(E):
//   p[r, c]  = exp(scale (x[r, c] - m[r])) / l[r]   for c <= t, else 0
//   m[r]     = max over visible c of x[r, c]
//   l[r]     = sum over visible c of exp(scale (x[r, c] - m[r]))
// and, for the backward, with dp = dL/dp and rowdot[r] = sum_c p[r, c] dp[r, c]:
//   dx[r, c] = scale p[r, c] (dp[r, c] - rowdot[r])      (dL/dx, zero where masked)
// Position 0 is always visible, so every row has a finite maximum and l >= 1. The maximum is
// taken of the unscaled scores and the scale applied to the difference (scale > 0, so the
// softmax is the same): a multiply then a subtract would be fused into one multiply-add where a
// compiler chooses to, which the row loop and these functors would not do alike.
#pragma once

#include <math.h>  // INFINITY

#include <cstdint>

#include "tpx/core/config.hpp"
#include "tpx/kernels/vectorizable_expf.hpp"

namespace tpx::kernels {

// The softmax's term exp(scale (x - max)) of a score x in a row whose largest is max.
TPX_HOST_DEVICE inline float causal_softmax_term(float scale, float x, float max) {
  return vectorizable_expf(scale * (x - max));
}

// The queries of a rank's rows: each sequence's block [first, first + queries), each position
// `group` consecutive rows (grouped-query attention's scores [batch..., T, G, S], the G query
// heads of a key head at each position; 1 otherwise).
struct query_block {
  std::int64_t queries;
  std::int64_t first;
  std::int64_t group = 1;
  // The position of row r's query, the last key it sees. The grid passes ask it of every score:
  // without groups they pay no second 64-bit division.
  TPX_HOST_DEVICE std::int64_t last_visible(std::int64_t r) const {
    return first + (group == 1 ? r : r / group) % queries;
  }
};

// x[r, c] where key c is visible from row r's query, -inf where it is masked.
template <class T>
struct causal_score {
  const T* x;
  std::int64_t cols;
  query_block block;
  TPX_HOST_DEVICE float operator()(std::int64_t r, std::int64_t c) const {
    return c <= block.last_visible(r) ? static_cast<float>(x[r * cols + c]) : -INFINITY;
  }
};

// The terms of the softmax denominator (0 where masked).
template <class T>
struct causal_shifted_exp {
  causal_score<T> score;
  float scale;
  const float* row_max;
  TPX_HOST_DEVICE float operator()(std::int64_t r, std::int64_t c) const {
    return causal_softmax_term(scale, score(r, c), row_max[r]);
  }
};

// p[r, c] = the term over l[r], written over the scores (each element reads only
// itself, so in place is safe).
template <class T>
struct causal_softmax_write {
  causal_shifted_exp<T> shifted;
  const float* row_sum;
  T* p;
  TPX_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    p[r * shifted.score.cols + c] = static_cast<T>(shifted(r, c) / row_sum[r]);
  }
};

// p[r, c] * dp[r, c]: the terms of rowdot.
template <class T>
struct product_term {
  const T* a;
  const T* b;
  std::int64_t cols;
  TPX_HOST_DEVICE float operator()(std::int64_t r, std::int64_t c) const {
    return static_cast<float>(a[r * cols + c]) * static_cast<float>(b[r * cols + c]);
  }
};

// dx[r, c] = scale p (dp - rowdot[r]), written over dp (in place, element by element).
template <class T>
struct softmax_backward_write {
  const T* p;
  const float* rowdot;
  std::int64_t cols;
  float scale;
  T* dp;
  TPX_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r * cols + c;
    dp[i] =
        static_cast<T>(scale * static_cast<float>(p[i]) * (static_cast<float>(dp[i]) - rowdot[r]));
  }
};

}  // namespace tpx::kernels

// The per-element math of the layers in nn/, as functors of a grid position (r, c): row r of a
// rank's block, column c of its block of the row. A memory space runs them with its grid loops
// (reduce_rows, for_each_element, sum_columns, scatter_add_rows: tensor/host_space.hpp on the
// host, cuda/kernels/grid.hpp on the GPU), so host and device run one definition of the math.
//
// A row here may be a piece of a longer row (RMSNorm over D_Y, logits over V_Y): the functors see
// only this rank's columns, and what needs the whole row (a sum of squares, a row maximum, the sum
// of exponentials) is reduced per piece and then combined across ranks by the layer, with a typed
// all-reduce. The functors finish the row with the pieces of kernels/rmsnorm.hpp and
// kernels/cross_entropy.hpp, the functions the unsharded row loops call.
//
// Each holds raw pointers into one memory space and is copied by value into a kernel; all row-major
// with `cols` columns. Tokens are int32 in a [rows, width] array, the one used read from column
// `column`.
#pragma once

#include <math.h>  // NAN

#include <cstdint>

#include "tpx/core/bfloat16.hpp"
#include "tpx/core/config.hpp"
#include "tpx/kernels/cross_entropy.hpp"
#include "tpx/kernels/rmsnorm.hpp"
#include "tpx/kernels/vectorizable_expf.hpp"

namespace tpx::kernels {

// x[r, c] as fp32: the term of a row sum, sum of squares or maximum.
template <class T>
struct element_at {
  const T* x;
  std::int64_t cols;
  TPX_HOST_DEVICE float operator()(std::int64_t r, std::int64_t c) const { return static_cast<float>(x[r * cols + c]); }
};

// tokens[r, column]: which row of a table row r of a batch reads.
struct token_at {
  const std::int32_t* tokens;
  std::int64_t width;
  std::int64_t column;
  TPX_HOST_DEVICE std::int64_t operator()(std::int64_t r) const { return tokens[r * width + column]; }
};

// --- RMSNorm of rows split over ranks (n: the global row length) ---

// rms_inverse[r] = 1 / sqrt(sum_of_squares[r] / n + eps): an elementwise functor.
struct rmsnorm_inverse {
  std::int64_t n;
  float eps;
  TPX_HOST_DEVICE float operator()(float sum_of_squares) const { return rmsnorm_inverse_rms(sum_of_squares, n, eps); }
};

// y[r, c] = x[r, c] * r_inv[r] * w[c]
template <class T, class W>
struct rmsnorm_apply {
  const T* x;
  const W* w;
  const float* r_inv;
  std::int64_t cols;
  T* y;
  TPX_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r * cols + c;
    y[i] = static_cast<T>(rmsnorm_output(static_cast<float>(x[i]), r_inv[r], static_cast<float>(w[c])));
  }
};

// w[c] dy[r, c] x[r, c]: the backward's row sum, before the all-reduce over the row's ranks.
template <class T, class W>
struct rmsnorm_backward_term_at {
  const T* x;
  const W* w;
  const T* dy;
  std::int64_t cols;
  TPX_HOST_DEVICE float operator()(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r * cols + c;
    return rmsnorm_backward_term(static_cast<float>(x[i]), static_cast<float>(w[c]), static_cast<float>(dy[i]));
  }
};

// dx[r, c] from the row's whole backward sum `dot[r]`.
template <class T, class W>
struct rmsnorm_input_gradient_at {
  const T* x;
  const W* w;
  const T* dy;
  const float* r_inv;
  const float* dot;
  std::int64_t cols;
  std::int64_t n;
  T* dx;
  TPX_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r * cols + c;
    const float s = rmsnorm_backward_scale(dot[r], r_inv[r], n);
    dx[i] = static_cast<T>(
        rmsnorm_input_gradient(static_cast<float>(x[i]), static_cast<float>(w[c]), static_cast<float>(dy[i]), r_inv[r], s));
  }
};

// dy[r, c] x[r, c] r_inv[r]: summed over rows into the weight gradient.
template <class T>
struct rmsnorm_weight_term_at {
  const T* x;
  const T* dy;
  const float* r_inv;
  std::int64_t cols;
  TPX_HOST_DEVICE float operator()(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r * cols + c;
    return rmsnorm_weight_gradient(static_cast<float>(x[i]), static_cast<float>(dy[i]), r_inv[r]);
  }
};

// --- Cross-entropy over a vocabulary split over ranks (this rank: columns [first, first + cols)) ---

// exp(x[r, c] - row_max[r]): summed into the row's sum of exponentials.
template <class T>
struct exp_shifted_at {
  const T* x;
  const float* row_max;
  std::int64_t cols;
  TPX_HOST_DEVICE float operator()(std::int64_t r, std::int64_t c) const {
    return vectorizable_expf(static_cast<float>(x[r * cols + c]) - row_max[r]);
  }
};

// out[r] = row r's logit of its target when this rank holds that column, else 0 (a grid of one
// column per row): one element of the row read, not a pass over the row.
template <class T>
struct target_logit_of_row {
  const T* x;
  token_at target;
  std::int64_t first;
  std::int64_t cols;
  float* out;
  TPX_HOST_DEVICE void operator()(std::int64_t r, std::int64_t) const {
    const std::int64_t c = target(r) - first;
    out[r] = c >= 0 && c < cols ? static_cast<float>(x[r * cols + c]) : 0.0f;
  }
};

// share * loss of row l * losses_of + c, for loss l (the grid is a row of `losses_of` columns per
// loss: one row of every row for a mean over all of them, one per pipeline stage's block):
// summed, this rank's part of loss l. NaN for a target outside [0, vocab), as
// cross_entropy_forward_row gives.
struct cross_entropy_loss_at {
  const float* row_max;
  const float* row_sum;
  const float* target_logit;
  token_at target;
  std::int64_t vocab;
  float share;
  std::int64_t losses_of;
  TPX_HOST_DEVICE float operator()(std::int64_t l, std::int64_t c) const {
    const std::int64_t r = l * losses_of + c, t = target(r);
    if (t < 0 || t >= vocab) return NAN;
    return share * cross_entropy_loss(softmax_stats{row_max[r], row_sum[r]}, target_logit[r]);
  }
};

// dx[r, c] = dloss * (softmax(x)[r, first + c] - [first + c is the target]).
template <class T, class G>
struct cross_entropy_gradient_at {
  const T* x;
  const float* row_max;
  const float* row_sum;
  token_at target;
  std::int64_t first;
  std::int64_t cols;
  float dloss;
  G* dx;
  TPX_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r * cols + c;
    dx[i] = static_cast<G>(cross_entropy_gradient(static_cast<float>(x[i]), target(r) == first + c,
                                                  softmax_stats{row_max[r], row_sum[r]}, dloss));
  }
};

// --- Embedding ---

// out[r, c] += table[token(r), c]
template <class T, class Table>
struct embedding_add {
  const Table* table;
  token_at token;
  std::int64_t cols;
  T* out;
  TPX_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r * cols + c;
    out[i] = static_cast<T>(static_cast<float>(out[i]) + static_cast<float>(table[token(r) * cols + c]));
  }
};

}  // namespace tpx::kernels

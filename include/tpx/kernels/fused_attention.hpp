// The math of fused causal attention (nn/fused_attention.hpp), one query or key row against a
// tile of rows of the other side, run by the CUDA kernels (cuda/kernels/fused_attention.hpp),
// which stage the tiles in shared memory; the host loops (tensor/host_fused_attention.hpp) share
// the online softmax's steps (raise_maximum, finish_row) and score_gradient, with the products
// arranged for vector units instead of one thread per row.
//
// Attention that never stores the [T, S] probabilities (FlashAttention, Dao et al. 2022; the
// backward as in FlashAttention-2, 2023). For query row t of one sequence, with scale =
// 1/sqrt(E), keys s <= t and x_s = scale q_t . k_s:
//   forward   the keys are visited in tiles, keeping the running maximum m of the scores, the
//             running sum l of exp(x_s - m) and acc = sum_s exp(x_s - m) v_s, both rescaled by
//             exp(m_old - m_new) when a tile raises the maximum; out_t = acc / l and
//             lse_t = m + log l, the log of the softmax denominator, kept for the backward.
//   backward  with delta_t = dout_t . out_t (= sum_s p_ts dp_ts), the probabilities are
//             recomputed, p_ts = exp(x_s - lse_t), and
//               dv_s += p_ts dout_t,   ds_ts = p_ts (dout_t . v_s - delta_t),
//               dq_t += scale ds_ts k_s,   dk_s += scale ds_ts q_t,
//             in two passes so that no two rows write one output: dq per query row over its keys,
//             dk and dv per key row over the queries that see it (t >= s).
// Every sum is in fp32 whatever the element type. The scaled query scale * q is formed once per
// row, so a score is the same fp32 sum of the same products in the forward and in both backward
// passes, and the recomputed probabilities are the forward's.
//
// Rows and tiles: q, k, v, out, dout are arrays of rows of E elements, in the attention_layout
// below ([sequences, T, E], or [B, T, H, E] read in place), lse and delta one element per such
// row; a tile is up to fused_attention_tile rows of one sequence at a stride ld between rows (the
// layout's row step times E in global memory, the staging pitch in shared memory). q, out, dout,
// lse and delta have the query side's layout, k and v the key side's (attention_shape: the two
// differ when a rank holds a block of each sequence's queries, as context parallelism splits
// them; query t of the block then sees keys s <= first + t).
#pragma once

#include <math.h>  // expf, logf, fmaxf, INFINITY

#include <cstdint>

#include "tpx/core/config.hpp"

namespace tpx::kernels {

// Rows of a tile, and the largest head width E the fused kernels take (the per-row state of
// 2 E floats lives in each thread's registers on the GPU).
inline constexpr int fused_attention_tile = 32;
inline constexpr int fused_attention_max_head = 128;

// Where row t of sequence s lies, as a row of E elements, in attention's arrays (q, k, v, out
// and their gradients; lse and delta hold one element per such row, in the same order). A
// sequence is one (batch, head) pair; `heads` sequences are interleaved at each position:
//   heads = 1   [sequences, T, E], heads first: a sequence's rows are consecutive
//   heads = H   [B, T, H, E], the layout the projections produce, read in place (as
//               FlashAttention reads strided inputs): a sequence's rows are H rows apart
// with s = b * H + h. Row t of sequence s is row ((s / heads) * pitch + t) * heads + s % heads,
// where pitch, the positions an array holds per batch entry, is t_len unless the rows are a run
// of positions within longer ones (t_pitch: the array's positions per entry, the run's first
// position at the array's start; a rank's two chunks of a load-balanced sequence, one call each).
struct attention_layout {
  std::int64_t t_len;
  std::int64_t heads = 1;
  std::int64_t t_pitch = 0;  // 0: t_len

  TPX_HOST_DEVICE std::int64_t pitch() const { return t_pitch > 0 ? t_pitch : t_len; }
  TPX_HOST_DEVICE std::int64_t row_of(std::int64_t s, std::int64_t t) const {
    return ((s / heads) * pitch() + t) * heads + s % heads;
  }
  // Rows between positions t and t + 1 of one sequence.
  TPX_HOST_DEVICE std::int64_t row_step() const { return heads; }
};

// One rank's attention of a sequence: its query rows, its key rows (k and v), and where its
// queries stand. Self-attention of whole sequences has queries and keys in one layout and
// first = 0. With context parallelism (nn/attention.hpp) a rank holds a block of each sequence's
// queries, from position `first`, against all of its keys: query row t then sees the keys up to
// position first + t, and key s is seen by the query rows from s - first on.
// Grouped-query attention: `group` consecutive query sequences share one key sequence (query
// sequence b reads key sequence b / group), the query heads of one key head being the innermost
// of the query side's sequences; group = 1 is multi-head attention.
struct attention_shape {
  attention_layout queries;
  attention_layout keys;
  std::int64_t first = 0;
  std::int64_t group = 1;

  static attention_shape whole_sequences(attention_layout layout) { return {layout, layout, 0}; }

  TPX_HOST_DEVICE std::int64_t key_sequence(std::int64_t query_sequence) const {
    return query_sequence / group;
  }

  TPX_HOST_DEVICE std::int64_t last_visible(std::int64_t t) const { return first + t; }
  TPX_HOST_DEVICE std::int64_t first_seeing(std::int64_t s) const {
    return s > first ? s - first : 0;
  }
};

// Row `row` of a [rows, e] array as fp32, times `factor`.
template <class T>
TPX_HOST_DEVICE void load_row(const T* row, int e, float factor, float* out) {
  for (int i = 0; i < e; ++i) out[i] = factor * static_cast<float>(row[i]);
}

template <class A, class B>
TPX_HOST_DEVICE float dot(const A* a, const B* b, int e) {
  float s = 0;
  for (int i = 0; i < e; ++i) s += static_cast<float>(a[i]) * static_cast<float>(b[i]);
  return s;
}

// The forward's running state of one query row.
struct attention_row_state {
  float m = -INFINITY;  // largest score so far
  float l = 0;          // sum of exp(score - m)
};

// Raises a query row's running maximum to cover a tile whose largest score is tile_max, and
// scales the running sum l by exp(m_old - m_new); returns that factor, by which the caller
// scales acc too (0 on the first tile, when acc and l are still 0).
TPX_HOST_DEVICE inline float raise_maximum(attention_row_state& state, float tile_max) {
  const float m = fmaxf(state.m, tile_max);
  const float rescale = expf(state.m - m);
  state.m = m;
  state.l *= rescale;
  return rescale;
}

// The gradient of score x_ts from its probability p_ts and dp_ts = dout_t . v_s.
TPX_HOST_DEVICE inline float score_gradient(float p, float dp, float delta) {
  return p * (dp - delta);
}

// One query row (qs = scale q, fp32) against n <= fused_attention_tile visible keys: rows j of k
// and v at k + j * ld, v + j * ld. Updates the state and acc[e] (sum of exp(x - m) v).
template <class T>
TPX_HOST_DEVICE void attend_tile(const float* qs, const T* k, const T* v, std::int64_t ld, int n,
                                 int e, attention_row_state& state, float* acc) {
  float x[fused_attention_tile];
  float tile_max = -INFINITY;
  for (int j = 0; j < n; ++j) {
    x[j] = dot(qs, k + j * ld, e);
    tile_max = fmaxf(tile_max, x[j]);
  }
  const float rescale = raise_maximum(state, tile_max);
  for (int i = 0; i < e; ++i) acc[i] *= rescale;
  for (int j = 0; j < n; ++j) {
    const float p = expf(x[j] - state.m);
    state.l += p;
    const T* vj = v + j * ld;
    for (int i = 0; i < e; ++i) acc[i] += p * static_cast<float>(vj[i]);
  }
}

// The end of a query row: out = acc / l, and the log of the softmax denominator.
template <class T>
TPX_HOST_DEVICE float finish_row(const attention_row_state& state, const float* acc, int e,
                                 T* out) {
  for (int i = 0; i < e; ++i) out[i] = static_cast<T>(acc[i] / state.l);
  return state.m + logf(state.l);
}

// dq of one query row (qs = scale q, dout fp32, its lse and delta) from n keys of a tile.
template <class T>
TPX_HOST_DEVICE void dq_tile(const float* qs, const float* dout, float lse, float delta, const T* k,
                             const T* v, std::int64_t ld, int n, int e, float scale, float* dq) {
  for (int j = 0; j < n; ++j) {
    const T* kj = k + j * ld;
    const float p = expf(dot(qs, kj, e) - lse);
    const float ds = score_gradient(p, dot(dout, v + j * ld, e), delta);
    for (int i = 0; i < e; ++i) dq[i] += scale * ds * static_cast<float>(kj[i]);
  }
}

// dk and dv of one key row (k, v fp32) from n queries of a tile: rows j of the scaled queries qs
// (fp32, scale q: so ds qs is the scale ds q of dk) and of dout at qs + j * ld, dout + j * ld,
// with lse[j] and delta[j].
template <class T>
TPX_HOST_DEVICE void dkdv_tile(const float* k, const float* v, const float* qs, const T* dout,
                               const float* lse, const float* delta, std::int64_t ld, int n, int e,
                               float* dk, float* dv) {
  for (int j = 0; j < n; ++j) {
    const float* qj = qs + j * ld;
    const T* dj = dout + j * ld;
    const float p = expf(dot(qj, k, e) - lse[j]);
    const float ds = score_gradient(p, dot(dj, v, e), delta[j]);
    for (int i = 0; i < e; ++i) {
      dv[i] += p * static_cast<float>(dj[i]);
      dk[i] += ds * qj[i];
    }
  }
}

}  // namespace tpx::kernels

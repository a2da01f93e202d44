// The host loops of fused causal attention (host_space::fused_attention_forward / _backward):
// the fused path of the host backend, and the twin the CUDA kernels are compared against.
//
// The math is the kernels' (kernels/fused_attention.hpp: the online softmax over tiles of
// fused_attention_tile keys, probabilities recomputed from lse in the backward pass, dq per query
// row, dk and dv per key row, every sum in fp32), arranged for vector units instead of one thread
// per row. A thread of the GPU computes one row's score against a key as a dot product; here that
// dot product would be one chain of dependent additions, which neither vectorizes nor pipelines.
// So each sequence's rows are staged once in fp32, as columns and as rows, each array in the
// forms its pass reads: the scores of a row against a whole tile, x_j = sum_i a_i col_i[s0 + j],
// are tile-wide vector operations, one per element i of the row, and the sums over a tile's rows
// (acc += p_j v_j, dq += ds_j k_j, ...) are vector operations along the row. Every loop has a
// constant trip count (a tile, or 16 elements of a row padded with zeros to a multiple of 16),
// which GCC vectorizes at -O2, and the whole pass is compiled a second time for AVX2 + FMA and
// picked at run time (kernels/host_loop.hpp). The exponentials are vectorizable_expf's. A score is
// the same sum of the same products, in the same order, in the forward pass and in both backward
// passes (q k and k q alike), so the recomputed probabilities are the forward's. Masked entries
// (keys after the query, rows past the sequence) get the score -inf or an lse of +inf, so their
// probability is exactly 0.
//
// Layout (nn/fused_attention.hpp chooses it): q, k, v, out, dout are rows of e elements and lse,
// delta one element per row, sequence b's query row t at shape.queries.row_of(b, t) and its key
// row s at shape.keys.row_of(b, s) (kernels::attention_layout: [sequences, t_len, e], or
// [B, t_len, H, e] read in place); query t sees keys s <= shape.first + t (a block of queries,
// context parallelism; first = 0 and as many keys as queries for whole sequences). Grouped-query
// attention: query sequence b reads key sequence b / shape.group, whose dk and dv add up the
// shares of its group's query sequences (in order) before they are written. Staging holds one
// sequence at a time: 4 (forward) or 8 (backward) arrays of about t_len x e floats, and the
// backward two more of s_len x e, a key sequence's dk and dv.
#pragma once

#include <math.h>  // INFINITY, logf

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tpx/kernels/fused_attention.hpp"
#include "tpx/kernels/host_loop.hpp"
#include "tpx/kernels/vectorizable_expf.hpp"

// Clang warns when a loop marked TPX_INDEPENDENT_ITERATIONS does not vectorize, as at -O1 (the
// sanitizer builds): the loop still runs, scalar (as in kernels/host_loop.hpp).
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

namespace tpx::detail {

namespace fused_host {

constexpr int tile = kernels::fused_attention_tile;
constexpr int block = 16;  // the row padding: every vector width up to AVX-512 divides it

// Which forms of a sequence staged_rows keeps: the forward reads q and v as rows and k as
// columns; the backward reads all four arrays both ways.
enum class staging { rows = 1, columns = 2, both = 3 };

// One sequence's [t_len, e] rows as fp32 times a factor, as rows at a pitch of e rounded up to
// `block`, and/or as columns, col(i)[t] = row t's element i, with room for a tile past the last
// row, so that a tile of columns starting at any row can be read whole. Padding is zero.
struct staged_rows {
  std::int64_t t_len = 0, pitch = 0, column_pitch = 0;
  std::vector<float> rows, columns;

  staged_rows(std::int64_t t, int e, staging forms = staging::both)
      : t_len(t),
        pitch((e + block - 1) / block * block),
        column_pitch(t + tile),
        rows(has(forms, staging::rows) ? static_cast<std::size_t>(t * pitch) : 0, 0.0f),
        columns(has(forms, staging::columns) ? static_cast<std::size_t>(pitch * column_pitch) : 0,
                0.0f) {}

  // Rows t of src at src + t * stride.
  template <class T>
  void load(const T* src, std::int64_t stride, int e, float factor) {
    for (std::int64_t t = 0; t < t_len; ++t)
      for (int i = 0; i < e; ++i) {
        const float x = factor * static_cast<float>(src[t * stride + i]);
        if (!rows.empty()) rows[static_cast<std::size_t>(t * pitch + i)] = x;
        if (!columns.empty()) columns[static_cast<std::size_t>(i * column_pitch + t)] = x;
      }
  }
  const float* row(std::int64_t t) const { return rows.data() + t * pitch; }
  const float* column_tile(std::int64_t first) const { return columns.data() + first; }

 private:
  static bool has(staging forms, staging form) {
    return (static_cast<int>(forms) & static_cast<int>(form)) != 0;
  }
};

// x[j] = sum_i a[i] col_i[j] for the tile of columns at `columns` (pitch column_pitch).
[[gnu::always_inline]] inline void tile_scores(const float* a, const float* columns,
                                               std::int64_t column_pitch, int e, float* x) {
  for (int j = 0; j < tile; ++j) x[j] = 0.0f;
  for (int i = 0; i < e; ++i) {
    const float ai = a[i];
    const float* col = columns + i * column_pitch;
    TPX_INDEPENDENT_ITERATIONS
    for (int j = 0; j < tile; ++j) x[j] += ai * col[j];
  }
}

// out[i] += w * row[i] over a padded row of `pitch` elements.
[[gnu::always_inline]] inline void add_scaled_row(float w, const float* row, std::int64_t pitch,
                                                  float* out) {
  for (std::int64_t first = 0; first < pitch; first += block) {
    TPX_INDEPENDENT_ITERATIONS
    for (std::int64_t i = first; i < first + block; ++i) out[i] += w * row[i];
  }
}

[[gnu::always_inline]] inline void scale_row(float w, std::int64_t pitch, float* out) {
  for (std::int64_t first = 0; first < pitch; first += block) {
    TPX_INDEPENDENT_ITERATIONS
    for (std::int64_t i = first; i < first + block; ++i) out[i] *= w;
  }
}

// p[j] = exp(x[j] - shift[j]), j over a tile.
[[gnu::always_inline]] inline void tile_exp(const float* x, const float* shift, float* p) {
  TPX_INDEPENDENT_ITERATIONS
  for (int j = 0; j < tile; ++j) p[j] = kernels::vectorizable_expf(x[j] - shift[j]);
}

// A sequence's rows in one side's layout: row t at first + t * step, rows stride elements apart.
struct sequence_rows {
  std::int64_t first, step, stride;
  sequence_rows(kernels::attention_layout layout, std::int64_t b, int e)
      : first(layout.row_of(b, 0)), step(layout.row_step()), stride(layout.row_step() * e) {}
  std::int64_t row(std::int64_t t) const { return first + t * step; }
};

template <class T>
[[gnu::always_inline]] inline void forward_pass(std::int64_t sequences,
                                                kernels::attention_shape shape, int e, float scale,
                                                const T* q, const T* k, const T* v, T* out,
                                                float* lse) {
  const std::int64_t t_len = shape.queries.t_len, s_len = shape.keys.t_len;
  staged_rows qs(t_len, e, staging::rows), ks(s_len, e, staging::columns),
      vs(s_len, e, staging::rows);
  std::vector<float> acc(static_cast<std::size_t>(qs.pitch));
  alignas(64) float x[tile], p[tile], m[tile];
  for (std::int64_t b = 0; b < sequences; ++b) {
    const sequence_rows queries(shape.queries, b, e), keys(shape.keys, shape.key_sequence(b), e);
    qs.load(q + queries.first * e, queries.stride, e, scale);
    if (b % shape.group == 0) {  // the first query sequence of its key sequence
      ks.load(k + keys.first * e, keys.stride, e, 1.0f);
      vs.load(v + keys.first * e, keys.stride, e, 1.0f);
    }
    for (std::int64_t t = 0; t < t_len; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      kernels::attention_row_state state;
      const std::int64_t last = shape.last_visible(t);
      for (std::int64_t s0 = 0; s0 <= last; s0 += tile) {
        const int n = static_cast<int>(std::min<std::int64_t>(tile, last + 1 - s0));
        tile_scores(qs.row(t), ks.column_tile(s0), ks.column_pitch, e, x);
        float tile_max = -INFINITY;
        for (int j = 0; j < tile; ++j) {
          if (j >= n) x[j] = -INFINITY;  // keys after the query's position
          tile_max = std::max(tile_max, x[j]);
        }
        scale_row(kernels::raise_maximum(state, tile_max), qs.pitch, acc.data());
        std::fill_n(m, tile, state.m);
        tile_exp(x, m, p);
        for (int j = 0; j < n; ++j) {
          state.l += p[j];
          add_scaled_row(p[j], vs.row(s0 + j), vs.pitch, acc.data());
        }
      }
      const std::int64_t row = queries.row(t);
      lse[row] = kernels::finish_row(state, acc.data(), e, out + row * e);
    }
  }
}

template <class T>
[[gnu::always_inline]] inline void backward_pass(std::int64_t sequences,
                                                 kernels::attention_shape shape, int e, float scale,
                                                 const T* q, const T* k, const T* v, const T* dout,
                                                 const float* lse, const float* delta, T* dq, T* dk,
                                                 T* dv) {
  const std::int64_t t_len = shape.queries.t_len, s_len = shape.keys.t_len;
  staged_rows qs(t_len, e), ks(s_len, e), vs(s_len, e), ds_out(t_len, e);
  // lse and delta of a sequence with a tile of padding: +inf and 0, so rows past the end get
  // probability 0.
  std::vector<float> lse_pad(static_cast<std::size_t>(t_len + tile), INFINITY),
      delta_pad(static_cast<std::size_t>(t_len + tile), 0.0f), grad(qs.pitch);
  // dk and dv of a key sequence, [s_len, pitch] each, summed over its group of query sequences.
  std::vector<float> dk_acc(static_cast<std::size_t>(s_len * qs.pitch)), dv_acc(dk_acc.size());
  alignas(64) float x[tile], p[tile], dp[tile], shift[tile];
  for (std::int64_t b = 0; b < sequences; ++b) {
    const sequence_rows queries(shape.queries, b, e), keys(shape.keys, shape.key_sequence(b), e);
    const bool first_of_group = b % shape.group == 0;
    const bool last_of_group = (b + 1) % shape.group == 0;
    qs.load(q + queries.first * e, queries.stride, e, scale);
    if (first_of_group) {
      ks.load(k + keys.first * e, keys.stride, e, 1.0f);
      vs.load(v + keys.first * e, keys.stride, e, 1.0f);
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);
    }
    ds_out.load(dout + queries.first * e, queries.stride, e, 1.0f);
    for (std::int64_t t = 0; t < t_len; ++t) {
      lse_pad[static_cast<std::size_t>(t)] = lse[queries.row(t)];
      delta_pad[static_cast<std::size_t>(t)] = delta[queries.row(t)];
    }
    // dq, a query row at a time, over its keys.
    for (std::int64_t t = 0; t < t_len; ++t) {
      std::fill(grad.begin(), grad.end(), 0.0f);
      std::fill_n(shift, tile, lse_pad[t]);
      const std::int64_t last = shape.last_visible(t);
      for (std::int64_t s0 = 0; s0 <= last; s0 += tile) {
        const int n = static_cast<int>(std::min<std::int64_t>(tile, last + 1 - s0));
        tile_scores(qs.row(t), ks.column_tile(s0), ks.column_pitch, e, x);
        tile_scores(ds_out.row(t), vs.column_tile(s0), vs.column_pitch, e, dp);
        tile_exp(x, shift, p);
        for (int j = 0; j < n; ++j)
          add_scaled_row(scale * kernels::score_gradient(p[j], dp[j], delta_pad[t]), ks.row(s0 + j),
                         ks.pitch, grad.data());
      }
      for (int i = 0; i < e; ++i) dq[queries.row(t) * e + i] = static_cast<T>(grad[i]);
    }
    // dk and dv, a key row at a time, over this query sequence's queries that see it
    // (first + t >= s), added to the group's; keys past the block's last query get 0.
    for (std::int64_t s = 0; s < s_len; ++s) {
      float* dk_row = dk_acc.data() + s * qs.pitch;
      float* dv_row = dv_acc.data() + s * qs.pitch;
      for (std::int64_t t0 = shape.first_seeing(s); t0 < t_len; t0 += tile) {
        const int n = static_cast<int>(std::min<std::int64_t>(tile, t_len - t0));
        tile_scores(ks.row(s), qs.column_tile(t0), qs.column_pitch, e, x);
        tile_scores(vs.row(s), ds_out.column_tile(t0), ds_out.column_pitch, e, dp);
        tile_exp(x, lse_pad.data() + t0, p);
        for (int j = 0; j < n; ++j) {
          add_scaled_row(p[j], ds_out.row(t0 + j), qs.pitch, dv_row);
          add_scaled_row(kernels::score_gradient(p[j], dp[j], delta_pad[t0 + j]), qs.row(t0 + j),
                         qs.pitch, dk_row);
        }
      }
    }
    if (last_of_group)
      for (std::int64_t s = 0; s < s_len; ++s)
        for (int i = 0; i < e; ++i) {
          dk[keys.row(s) * e + i] = static_cast<T>(dk_acc[s * qs.pitch + i]);
          dv[keys.row(s) * e + i] = static_cast<T>(dv_acc[s * qs.pitch + i]);
        }
  }
}

#if TPX_HOST_LOOP_AVX2
template <class T>
__attribute__((target("avx2,fma"))) void forward_pass_avx2(std::int64_t sequences,
                                                           kernels::attention_shape shape, int e,
                                                           float scale, const T* q, const T* k,
                                                           const T* v, T* out, float* lse) {
  forward_pass(sequences, shape, e, scale, q, k, v, out, lse);
}
template <class T>
__attribute__((target("avx2,fma"))) void backward_pass_avx2(std::int64_t sequences,
                                                            kernels::attention_shape shape, int e,
                                                            float scale, const T* q, const T* k,
                                                            const T* v, const T* dout,
                                                            const float* lse, const float* delta,
                                                            T* dq, T* dk, T* dv) {
  backward_pass(sequences, shape, e, scale, q, k, v, dout, lse, delta, dq, dk, dv);
}
#endif

}  // namespace fused_host

template <class T>
void host_fused_attention_forward(std::int64_t sequences, kernels::attention_shape shape, int e,
                                  float scale, const T* q, const T* k, const T* v, T* out,
                                  float* lse) {
#if TPX_HOST_LOOP_AVX2
  if (kernels::host_loop_detail::cpu_has_avx2_fma())
    return fused_host::forward_pass_avx2(sequences, shape, e, scale, q, k, v, out, lse);
#endif
  fused_host::forward_pass(sequences, shape, e, scale, q, k, v, out, lse);
}

// dq, dk, dv (overwritten) from dout and the forward's lse; delta[t] = dout_t . out_t.
template <class T>
void host_fused_attention_backward(std::int64_t sequences, kernels::attention_shape shape, int e,
                                   float scale, const T* q, const T* k, const T* v, const T* dout,
                                   const float* lse, const float* delta, T* dq, T* dk, T* dv) {
#if TPX_HOST_LOOP_AVX2
  if (kernels::host_loop_detail::cpu_has_avx2_fma())
    return fused_host::backward_pass_avx2(sequences, shape, e, scale, q, k, v, dout, lse, delta, dq,
                                          dk, dv);
#endif
  fused_host::backward_pass(sequences, shape, e, scale, q, k, v, dout, lse, delta, dq, dk, dv);
}

}  // namespace tpx::detail

#if defined(__clang__)
#pragma clang diagnostic pop
#endif

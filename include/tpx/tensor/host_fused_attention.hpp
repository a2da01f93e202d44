// The host loops of fused causal attention (host_space::fused_attention_forward / _backward):
// every row of every sequence through the tile functions of kernels/fused_attention.hpp, in
// tiles of fused_attention_tile rows read in place, as the CUDA kernels run them on tiles staged
// in shared memory. They are the device kernels' twin, which the CUDA tests compare against,
// and the fused path of the host backend.
//
// Layout (nn/fused_attention.hpp arranges it): q, k, v, out, dout [sequences, t_len, e]
// row-major, lse and delta [sequences, t_len]; query t sees keys s <= t.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tpx/kernels/fused_attention.hpp"

namespace tpx::detail {

template <class T>
void host_fused_attention_forward(std::int64_t sequences, std::int64_t t_len, int e, float scale,
                                  const T* q, const T* k, const T* v, T* out, float* lse) {
  constexpr int tile = kernels::fused_attention_tile;
  std::vector<float> qs(static_cast<std::size_t>(e)), acc(static_cast<std::size_t>(e));
  for (std::int64_t b = 0; b < sequences; ++b) {
    const std::int64_t base = b * t_len;
    for (std::int64_t t = 0; t < t_len; ++t) {
      kernels::load_row(q + (base + t) * e, e, scale, qs.data());
      std::fill(acc.begin(), acc.end(), 0.0f);
      kernels::attention_row_state state;
      for (std::int64_t s0 = 0; s0 <= t; s0 += tile) {
        const int n = static_cast<int>(std::min<std::int64_t>(tile, t + 1 - s0));
        kernels::attend_tile(qs.data(), k + (base + s0) * e, v + (base + s0) * e, e, n, e, state,
                             acc.data());
      }
      lse[base + t] = kernels::finish_row(state, acc.data(), e, out + (base + t) * e);
    }
  }
}

// dq, dk, dv (overwritten) from dout and the forward's lse; delta[t] = dout_t . out_t.
template <class T>
void host_fused_attention_backward(std::int64_t sequences, std::int64_t t_len, int e, float scale,
                                   const T* q, const T* k, const T* v, const T* dout,
                                   const float* lse, const float* delta, T* dq, T* dk, T* dv) {
  constexpr int tile = kernels::fused_attention_tile;
  const auto row = static_cast<std::size_t>(e);
  std::vector<float> qs(static_cast<std::size_t>(t_len) * row), dout_row(row), kv(2 * row),
      grad(2 * row);
  for (std::int64_t b = 0; b < sequences; ++b) {
    const std::int64_t base = b * t_len;
    for (std::int64_t t = 0; t < t_len; ++t)
      kernels::load_row(q + (base + t) * e, e, scale, qs.data() + t * e);
    // dq, a query row at a time, over its keys.
    for (std::int64_t t = 0; t < t_len; ++t) {
      kernels::load_row(dout + (base + t) * e, e, 1.0f, dout_row.data());
      std::fill(grad.begin(), grad.begin() + e, 0.0f);
      for (std::int64_t s0 = 0; s0 <= t; s0 += tile) {
        const int n = static_cast<int>(std::min<std::int64_t>(tile, t + 1 - s0));
        kernels::dq_tile(qs.data() + t * e, dout_row.data(), lse[base + t], delta[base + t],
                         k + (base + s0) * e, v + (base + s0) * e, e, n, e, scale, grad.data());
      }
      for (int i = 0; i < e; ++i) dq[(base + t) * e + i] = static_cast<T>(grad[i]);
    }
    // dk and dv, a key row at a time, over the queries that see it.
    for (std::int64_t s = 0; s < t_len; ++s) {
      kernels::load_row(k + (base + s) * e, e, 1.0f, kv.data());
      kernels::load_row(v + (base + s) * e, e, 1.0f, kv.data() + e);
      std::fill(grad.begin(), grad.end(), 0.0f);
      for (std::int64_t t0 = s; t0 < t_len; t0 += tile) {
        const int n = static_cast<int>(std::min<std::int64_t>(tile, t_len - t0));
        kernels::dkdv_tile(kv.data(), kv.data() + e, qs.data() + t0 * e, dout + (base + t0) * e,
                           lse + base + t0, delta + base + t0, e, n, e, grad.data(),
                           grad.data() + e);
      }
      for (int i = 0; i < e; ++i) {
        dk[(base + s) * e + i] = static_cast<T>(grad[i]);
        dv[(base + s) * e + i] = static_cast<T>(grad[e + i]);
      }
    }
  }
}

}  // namespace tpx::detail

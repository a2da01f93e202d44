// How tpx-bench-cuda times one attention configuration (attention.cu, the kernels as the layers
// call them; attention_tilings.cu, the tensor-core kernels under other tilings): given the
// forward and backward calls, it times each on B x H sequences of T rows of E, N(0, 1) inputs,
// scale 1/sqrt(E), laid out heads first ([B x H, T, E], as SDPA's peer takes them) or as the
// GPT's projections leave them ([B, T, H, E] read in place, a sequence's rows H rows apart:
// kernels::attention_layout), and compares the first sequence's out, dq, dk and dv (under
// grouped-query attention, the first key sequence's and its group's query sequences') with the
// host twin (tensor/host_fused_attention.hpp) on the same inputs (seeded, so the same for every
// call of one shape: host_twins keeps each shape's, which the host takes seconds to compute at
// T = 4096).
// With a context_block of X ranks, the queries are rank r's block of each sequence, T / X rows
// from position r T / X, against all T keys, as context parallelism's layers call the kernels
// (nn/attention.hpp gathers the keys over the ranks).
// The backward is the rowdot
// delta[t] = dout_t . out_t (reduce_rows over product_term, as nn/fused_attention.hpp forms it)
// and then the backward call, because SDPA's backward does that preprocessing inside its own
// call too; it runs on the last timed forward's out and lse. Included by those two nvcc-compiled
// files only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "measure.hpp"
#include "measuring.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/kernels/grid.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/kernels/attention_terms.hpp"
#include "tpx/kernels/fused_attention.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/tensor/host_fused_attention.hpp"

namespace tpx::bench::cuda {

// Which queries of each sequence a row times: rank `rank` of `ranks`' block under context
// parallelism (T / ranks rows from position rank T / ranks); 0 of 1 is the whole sequence.
struct context_block {
  int rank = 0, ranks = 1;

  std::int64_t queries(std::int64_t t_len) const { return t_len / ranks; }
  std::int64_t first(std::int64_t t_len) const { return rank * queries(t_len); }
};

// FlashAttention's count for causal attention: two [T, T] x E products, half of them masked,
// 4 E T^2 / 2 per sequence; for a block of Tq queries from position `first`, which see
// first + Tq / 2 keys on average, 4 E Tq (first + Tq / 2) (the whole sequence's count at
// first = 0, and the blocks of one sequence's ranks add up to it).
inline double attention_forward_flops(std::int64_t sequences, std::int64_t queries,
                                      std::int64_t first, std::int64_t e) {
  const double tq = static_cast<double>(queries);
  return 4.0 * static_cast<double>(sequences) * static_cast<double>(e) * tq *
         (static_cast<double>(first) + tq / 2.0);
}

// The first `count` sequences' t_len rows of e elements (queries' or keys'), in a device array
// whose positions hold `heads` sequences' rows each (kernels::attention_layout), as one host array
// in the same layout with `count` sequences: heads first (heads = 1) the first count x t_len
// rows, else [t_len, count, e].
template <class T>
std::vector<T> first_sequences(const tpx::cuda::device_buffer<T>& b, std::int64_t count,
                               std::int64_t t_len, int e, std::int64_t heads) {
  std::vector<T> host(static_cast<std::size_t>(count * t_len * e));
  const std::size_t row = static_cast<std::size_t>(e) * sizeof(T);
  if (heads == 1) {
    TPX_CUDA_CHECK(
        cudaMemcpy(host.data(), b.data(), host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  const std::size_t width = row * static_cast<std::size_t>(count);
  TPX_CUDA_CHECK(cudaMemcpy2D(host.data(), width, b.data(), row * static_cast<std::size_t>(heads),
                              width, static_cast<std::size_t>(t_len), cudaMemcpyDeviceToHost));
  return host;
}

// The host twin's out, dq, dk and dv of the first key sequence's group, by (T, E, rank, ranks,
// group).
template <class T>
struct host_outputs {
  std::vector<T> out, dq, dk, dv;
};
template <class T>
using host_twins = std::map<std::tuple<std::int64_t, int, int, int, std::int64_t>, host_outputs<T>>;

// The host twin of `sequences` query sequences (one key sequence's group): q and dout in
// shape.queries' layout, k and v one sequence of shape.keys.t_len rows, in `shape`'s positions.
template <class T>
host_outputs<T> host_twin(std::int64_t sequences, const kernels::attention_shape& shape, int e,
                          float scale, const std::vector<T>& q, const std::vector<T>& k,
                          const std::vector<T>& v, const std::vector<T>& dout) {
  const std::int64_t rows = sequences * shape.queries.t_len;
  host_outputs<T> h{std::vector<T>(q.size()), std::vector<T>(q.size()), std::vector<T>(k.size()),
                    std::vector<T>(k.size())};
  std::vector<float> lse(static_cast<std::size_t>(rows)), delta(static_cast<std::size_t>(rows));
  tpx::detail::host_fused_attention_forward(sequences, shape, e, scale, q.data(), k.data(),
                                            v.data(), h.out.data(), lse.data());
  for (std::int64_t t = 0; t < rows; ++t)
    for (std::int64_t i = 0; i < e; ++i)
      delta[t] += kernels::product_term<T>{h.out.data(), dout.data(), e}(t, i);
  tpx::detail::host_fused_attention_backward(sequences, shape, e, scale, q.data(), k.data(),
                                             v.data(), dout.data(), lse.data(), delta.data(),
                                             h.dq.data(), h.dk.data(), h.dv.data());
  return h;
}

// One row: forward(stream, sequences, shape, scale, q, k, v, out, lse) and
// backward(stream, sequences, shape, scale, q, k, v, dout, lse, delta, dq, dk, dv) timed and
// checked as above (`tokens`: in [B, T, H, E], else heads first; `block`: which queries), the
// host twin taken from `twins` or added to it; `type` and `tiling` label the row. With
// kv_heads < heads, grouped-query attention: B x kv_heads key sequences, each read by
// heads / kv_heads consecutive query heads (kernels::attention_shape::group), checked on the
// first key sequence and the query sequences of its group.
template <class T, class Forward, class Backward>
attention_row time_attention(const std::string& type, const std::string& tiling, std::int64_t batch,
                             std::int64_t heads, std::int64_t kv_heads, std::int64_t t_len,
                             context_block block, int e, bool tokens, int iters, int warmup,
                             const Forward& forward_call, const Backward& backward_call,
                             host_twins<T>& twins) {
  namespace cu = tpx::cuda;
  cu::rank_resources r(0, {});
  const cudaStream_t s = r.stream();
  const std::int64_t sequences = batch * heads, queries = block.queries(t_len);
  const std::int64_t group = heads / kv_heads;
  const std::int64_t rows = sequences * queries, n = rows * e, key_n = batch * kv_heads * t_len * e;
  const float scale = 1.0f / std::sqrt(static_cast<float>(e));
  auto q = random_buffer<T>(r, n, 1), k = random_buffer<T>(r, key_n, 2);
  auto v = random_buffer<T>(r, key_n, 3), dout = random_buffer<T>(r, n, 4);
  const auto size = static_cast<std::size_t>(n), key_size = static_cast<std::size_t>(key_n);
  cu::device_buffer<T> out(size, r.pool(), s), dq(size, r.pool(), s), dk(key_size, r.pool(), s),
      dv(key_size, r.pool(), s);
  cu::device_buffer<float> lse(static_cast<std::size_t>(rows), r.pool(), s);
  cu::device_buffer<float> delta(static_cast<std::size_t>(rows), r.pool(), s);

  const std::int64_t query_heads_per_position = tokens ? heads : 1;
  const std::int64_t key_heads_per_position = tokens ? kv_heads : 1;
  const kernels::attention_shape shape{{queries, query_heads_per_position},
                                       {t_len, key_heads_per_position},
                                       block.first(t_len),
                                       group};
  const auto forward = [&] {
    forward_call(s, sequences, shape, scale, q.data(), k.data(), v.data(), out.data(), lse.data());
  };
  const auto backward = [&] {
    cu::reduce_rows<kernels::sum_reducer<float>>(
        s, rows, e, kernels::product_term<T>{out.data(), dout.data(), e}, delta.data());
    backward_call(s, sequences, shape, scale, q.data(), k.data(), v.data(), dout.data(),
                  lse.data(), delta.data(), dq.data(), dk.data(), dv.data());
  };
  const double forward_seconds = seconds_per_call(s, iters, warmup, forward);
  const double backward_seconds = seconds_per_call(s, iters, warmup, backward);
  r.synchronize();

  // The first key sequence and its group's query sequences against the host twin. Their rows are
  // other elements of the random arrays in the two layouts, so `twins` must hold one layout's
  // (each bench run takes one).
  const auto first_queries = [&](const cu::device_buffer<T>& b) {
    return first_sequences(b, group, queries, e, query_heads_per_position);
  };
  const auto first_keys = [&](const cu::device_buffer<T>& b) {
    return first_sequences(b, 1, t_len, e, key_heads_per_position);
  };
  const std::tuple<std::int64_t, int, int, int, std::int64_t> twin_key{t_len, e, block.rank,
                                                                       block.ranks, group};
  auto twin = twins.find(twin_key);
  if (twin == twins.end()) {
    const kernels::attention_shape one{{queries, tokens ? group : 1}, {t_len}, shape.first, group};
    twin = twins
               .emplace(twin_key, host_twin(group, one, e, scale, first_queries(q), first_keys(k),
                                            first_keys(v), first_queries(dout)))
               .first;
  }
  const host_outputs<T>& h = twin->second;
  const double diff = std::max(
      {relative_difference(first_queries(out), h.out), relative_difference(first_queries(dq), h.dq),
       relative_difference(first_keys(dk), h.dk), relative_difference(first_keys(dv), h.dv)});

  const double flops = attention_forward_flops(sequences, queries, shape.first, e);
  return {type,
          tiling,
          batch,
          heads,
          kv_heads,
          t_len,
          block.rank,
          block.ranks,
          e,
          forward_seconds * 1e3,
          backward_seconds * 1e3,
          flops / forward_seconds / 1e12,
          2.5 * flops / backward_seconds / 1e12,
          diff};
}

}  // namespace tpx::bench::cuda

// How tpx-bench-cuda times one attention configuration (attention.cu, the kernels as the layers
// call them; attention_tilings.cu, the tensor-core kernels under other tilings): given the
// forward and backward calls, it times each on B x H sequences of T rows of E, N(0, 1) inputs,
// scale 1/sqrt(E), laid out heads first ([B x H, T, E], as SDPA's peer takes them) or as the
// GPT's projections leave them ([B, T, H, E] read in place, a sequence's rows H rows apart:
// kernels::attention_layout), and compares the first sequence's out, dq, dk and dv with the host
// twin (tensor/host_fused_attention.hpp) on the same inputs (seeded, so the same for every call of
// one shape: host_twins keeps each shape's, which the host takes seconds to compute at T = 4096).
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
#include <utility>
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

// FlashAttention's count for causal attention: two [T, T] x E products, half of them masked.
inline double attention_forward_flops(std::int64_t sequences, std::int64_t t_len, std::int64_t e) {
  return 4.0 * static_cast<double>(sequences) * static_cast<double>(t_len) *
         static_cast<double>(t_len) * static_cast<double>(e) / 2.0;
}

// The first sequence's t_len rows of e elements, `step` rows apart in a device array, as one
// [t_len, e] array.
template <class T>
std::vector<T> first_sequence(const tpx::cuda::device_buffer<T>& b, std::int64_t t_len, int e,
                              std::int64_t step) {
  std::vector<T> host(static_cast<std::size_t>(t_len * e));
  const std::size_t row = static_cast<std::size_t>(e) * sizeof(T);
  TPX_CUDA_CHECK(cudaMemcpy2D(host.data(), row, b.data(), row * static_cast<std::size_t>(step), row,
                              static_cast<std::size_t>(t_len), cudaMemcpyDeviceToHost));
  return host;
}

// The host twin's out, dq, dk and dv of the first sequence, by (T, E).
template <class T>
struct host_outputs {
  std::vector<T> out, dq, dk, dv;
};
template <class T>
using host_twins = std::map<std::pair<std::int64_t, int>, host_outputs<T>>;

// The host twin of one sequence [t_len, e] of inputs.
template <class T>
host_outputs<T> host_twin(std::int64_t t_len, int e, float scale, const std::vector<T>& q,
                          const std::vector<T>& k, const std::vector<T>& v,
                          const std::vector<T>& dout) {
  const auto shape = kernels::attention_shape::whole_sequences({t_len});
  host_outputs<T> h{std::vector<T>(q.size()), std::vector<T>(q.size()), std::vector<T>(q.size()),
                    std::vector<T>(q.size())};
  std::vector<float> lse(static_cast<std::size_t>(t_len)), delta(static_cast<std::size_t>(t_len));
  tpx::detail::host_fused_attention_forward(1, shape, e, scale, q.data(), k.data(), v.data(),
                                            h.out.data(), lse.data());
  for (std::int64_t t = 0; t < t_len; ++t)
    for (std::int64_t i = 0; i < e; ++i)
      delta[t] += kernels::product_term<T>{h.out.data(), dout.data(), e}(t, i);
  tpx::detail::host_fused_attention_backward(1, shape, e, scale, q.data(), k.data(), v.data(),
                                             dout.data(), lse.data(), delta.data(), h.dq.data(),
                                             h.dk.data(), h.dv.data());
  return h;
}

// One row: forward(stream, sequences, layout, scale, q, k, v, out, lse) and
// backward(stream, sequences, layout, scale, q, k, v, dout, lse, delta, dq, dk, dv) timed and
// checked as above (`tokens`: in [B, T, H, E], else heads first), the host twin taken from
// `twins` or added to it; `type` and `tiling` label the row.
template <class T, class Forward, class Backward>
attention_row time_attention(const std::string& type, const std::string& tiling, std::int64_t batch,
                             std::int64_t heads, std::int64_t t_len, int e, bool tokens, int iters,
                             int warmup, const Forward& forward_call, const Backward& backward_call,
                             host_twins<T>& twins) {
  namespace cu = tpx::cuda;
  cu::rank_resources r(0, {});
  const cudaStream_t s = r.stream();
  const std::int64_t sequences = batch * heads, rows = sequences * t_len, n = rows * e;
  const float scale = 1.0f / std::sqrt(static_cast<float>(e));
  auto q = random_buffer<T>(r, n, 1), k = random_buffer<T>(r, n, 2), v = random_buffer<T>(r, n, 3);
  auto dout = random_buffer<T>(r, n, 4);
  const auto size = static_cast<std::size_t>(n);
  cu::device_buffer<T> out(size, r.pool(), s), dq(size, r.pool(), s), dk(size, r.pool(), s),
      dv(size, r.pool(), s);
  cu::device_buffer<float> lse(static_cast<std::size_t>(rows), r.pool(), s);
  cu::device_buffer<float> delta(static_cast<std::size_t>(rows), r.pool(), s);

  const kernels::attention_layout layout{t_len, tokens ? heads : 1};
  const auto forward = [&] {
    forward_call(s, sequences, layout, scale, q.data(), k.data(), v.data(), out.data(), lse.data());
  };
  const auto backward = [&] {
    cu::reduce_rows<kernels::sum_reducer<float>>(
        s, rows, e, kernels::product_term<T>{out.data(), dout.data(), e}, delta.data());
    backward_call(s, sequences, layout, scale, q.data(), k.data(), v.data(), dout.data(),
                  lse.data(), delta.data(), dq.data(), dk.data(), dv.data());
  };
  const double forward_seconds = seconds_per_call(s, iters, warmup, forward);
  const double backward_seconds = seconds_per_call(s, iters, warmup, backward);
  r.synchronize();

  // The first sequence against the host twin. Its rows are other elements of the random arrays in
  // the two layouts, so `twins` must hold one layout's (each bench run takes one).
  const std::int64_t step = layout.row_step();
  const auto first = [&](const cu::device_buffer<T>& b) {
    return first_sequence(b, t_len, e, step);
  };
  auto twin = twins.find({t_len, e});
  if (twin == twins.end())
    twin = twins
               .emplace(std::pair{t_len, e},
                        host_twin(t_len, e, scale, first(q), first(k), first(v), first(dout)))
               .first;
  const host_outputs<T>& h = twin->second;
  const double diff =
      std::max({relative_difference(first(out), h.out), relative_difference(first(dq), h.dq),
                relative_difference(first(dk), h.dk), relative_difference(first(dv), h.dv)});

  const double flops = attention_forward_flops(sequences, t_len, e);
  return {type,
          tiling,
          batch,
          heads,
          t_len,
          e,
          forward_seconds * 1e3,
          backward_seconds * 1e3,
          flops / forward_seconds / 1e12,
          2.5 * flops / backward_seconds / 1e12,
          diff};
}

}  // namespace tpx::bench::cuda

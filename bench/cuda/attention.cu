// tpx-bench-cuda attention: tpx's fused causal attention kernels alone, forward and backward,
// in ms per call and TFLOP/s (measure.hpp), the tpx side of issue 11's comparison with PyTorch's
// scaled_dot_product_attention (bench/peers/torch_sdpa.py, bench/peers/compare.py --attention).
//
// The calls are the ones nn::fused_causal_attention_forward / _backward make on a device tensor,
// without the tensor layer: the forward writes out and lse; the backward is the rowdot
// delta[t] = dout_t . out_t (reduce_rows over product_term, as nn/fused_attention.hpp forms it)
// and then the backward kernels, because SDPA's backward does that preprocessing inside its own
// call too. The backward runs on the last timed forward's out and lse. Inputs are N(0, 1), the
// scale 1/sqrt(e), laid out heads first ([B x H, T, E]), as the peer's [B, H, T, E]; the GPT's
// layers pass [B, T, H, E] (kernels::attention_layout with H heads per position), which these
// rows do not time.
//
// After timing, the first sequence's out, dq, dk and dv are compared with the host twin
// (tensor/host_fused_attention.hpp) computed from the same inputs: the largest difference,
// relative to the largest host value, is the row's max_rel_diff (fp32: rounding only; bf16: a
// few bf16 ulps, from the outputs' rounding and any bf16 arithmetic of the kernel).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "measure.hpp"
#include "measuring.hpp"
#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/kernels/fused_attention.hpp"
#include "tpx/cuda/kernels/grid.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/kernels/attention_terms.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/tensor/host_fused_attention.hpp"

namespace tpx::bench::cuda {

namespace {

namespace cu = tpx::cuda;

// FlashAttention's count for causal attention: two [T, T] x E products, half of them masked.
double forward_flops(std::int64_t sequences, std::int64_t t_len, std::int64_t e) {
  return 4.0 * static_cast<double>(sequences) * static_cast<double>(t_len) *
         static_cast<double>(t_len) * static_cast<double>(e) / 2.0;
}

// The first n elements of a device array.
template <class T>
std::vector<T> first_elements(const cu::device_buffer<T>& b, std::int64_t n) {
  std::vector<T> host(static_cast<std::size_t>(n));
  TPX_CUDA_CHECK(
      cudaMemcpy(host.data(), b.data(), host.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

template <class T>
attention_row measure_one(const std::string& type, std::int64_t batch, std::int64_t heads,
                          std::int64_t t_len, int e, int iters, int warmup) {
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

  const kernels::attention_layout layout{t_len};  // heads first
  const auto forward = [&] {
    cu::fused_attention_forward(s, sequences, layout, e, scale, q.data(), k.data(), v.data(),
                                out.data(), lse.data());
  };
  const auto backward = [&] {
    cu::reduce_rows<kernels::sum_reducer<float>>(
        s, rows, e, kernels::product_term<T>{out.data(), dout.data(), e}, delta.data());
    cu::fused_attention_backward(s, sequences, layout, e, scale, q.data(), k.data(), v.data(),
                                 dout.data(), lse.data(), delta.data(), dq.data(), dk.data(),
                                 dv.data());
  };
  const double forward_seconds = seconds_per_call(s, iters, warmup, forward);
  const double backward_seconds = seconds_per_call(s, iters, warmup, backward);
  r.synchronize();

  // The host twin on the first sequence.
  const std::int64_t one = t_len * e;
  const std::vector<T> hq = first_elements(q, one), hk = first_elements(k, one),
                       hv = first_elements(v, one), hdout = first_elements(dout, one);
  std::vector<T> hout(hq.size()), hdq(hq.size()), hdk(hq.size()), hdv(hq.size());
  std::vector<float> hlse(static_cast<std::size_t>(t_len)), hdelta(static_cast<std::size_t>(t_len));
  tpx::detail::host_fused_attention_forward(1, layout, e, scale, hq.data(), hk.data(), hv.data(),
                                            hout.data(), hlse.data());
  for (std::int64_t t = 0; t < t_len; ++t)
    for (std::int64_t i = 0; i < e; ++i)
      hdelta[t] += kernels::product_term<T>{hout.data(), hdout.data(), e}(t, i);
  tpx::detail::host_fused_attention_backward(1, layout, e, scale, hq.data(), hk.data(), hv.data(),
                                             hdout.data(), hlse.data(), hdelta.data(), hdq.data(),
                                             hdk.data(), hdv.data());
  const double diff = std::max({relative_difference(first_elements(out, one), hout),
                                relative_difference(first_elements(dq, one), hdq),
                                relative_difference(first_elements(dk, one), hdk),
                                relative_difference(first_elements(dv, one), hdv)});

  const double flops = forward_flops(sequences, t_len, e);
  return {type,
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

}  // namespace

std::vector<attention_row> measure_attention(std::int64_t batch, std::int64_t heads,
                                             const std::vector<std::int64_t>& lengths, int e,
                                             const std::vector<std::string>& types, int iters,
                                             int warmup) {
  if (e < 1 || e > kernels::fused_attention_max_head)
    throw std::invalid_argument("attention: head width -E " + std::to_string(e) +
                                "; the fused kernels take 1 to " +
                                std::to_string(kernels::fused_attention_max_head));
  std::vector<attention_row> rows;
  for (const std::string& type : types)
    for (std::int64_t t_len : lengths) {
      if (type == "bf16")
        rows.push_back(measure_one<bf16>(type, batch, heads, t_len, e, iters, warmup));
      else if (type == "fp32")
        rows.push_back(measure_one<float>(type, batch, heads, t_len, e, iters, warmup));
      else
        throw std::invalid_argument("attention: unknown type " + type + " (bf16, fp32)");
    }
  return rows;
}

}  // namespace tpx::bench::cuda

// tpx-bench-cuda attention: tpx's fused causal attention kernels alone, forward and backward,
// in ms per call and TFLOP/s (measure.hpp), the tpx side of issue 11's comparison with PyTorch's
// scaled_dot_product_attention (bench/peers/torch_sdpa.py, bench/peers/compare.py --attention).
//
// The calls are the ones nn::fused_causal_attention_forward / _backward make on a device tensor,
// without the tensor layer, timed and checked against the host twin by attention_timing.hpp.
// Inputs are laid out heads first ([B x H, T, E]), as the peer's [B, H, T, E], or with --layout
// tokens as the GPT's layers pass them ([B, T, H, E]: kernels::attention_layout with H heads per
// position). With --context-parallel X it also times each rank's block of queries against the
// whole sequence's keys, as context parallelism's layers call the kernels (rank X - 1's, the last
// T / X queries, is the busiest). With --kv-heads G < H it times grouped-query attention, as the
// GPT's --kv-heads makes it: G key and value heads, each read by H / G query heads.
// attention_tilings.cu times the tensor-core kernels under other tilings.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention_timing.hpp"
#include "measure.hpp"
#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/kernels/fused_attention.hpp"
#include "tpx/kernels/fused_attention.hpp"

namespace tpx::bench::cuda {

namespace {

template <class T>
attention_row measure_one(const std::string& type, std::int64_t batch, std::int64_t heads,
                          std::int64_t kv_heads, std::int64_t t_len, context_block block, int e,
                          bool tokens, int iters, int warmup) {
  host_twins<T> twins;  // each row is a shape of its own
  return time_attention<T>(
      type, "", batch, heads, kv_heads, t_len, block, e, tokens, iters, warmup,
      [e](cudaStream_t s, std::int64_t sequences, const kernels::attention_shape& shape,
          float scale, const T* q, const T* k, const T* v, T* out, float* lse) {
        tpx::cuda::fused_attention_forward(s, sequences, shape, e, scale, q, k, v, out, lse);
      },
      [e](cudaStream_t s, std::int64_t sequences, const kernels::attention_shape& shape,
          float scale, const T* q, const T* k, const T* v, const T* dout, const float* lse,
          const float* delta, T* dq, T* dk, T* dv) {
        tpx::cuda::fused_attention_backward(s, sequences, shape, e, scale, q, k, v, dout, lse,
                                            delta, dq, dk, dv);
      },
      twins);
}

}  // namespace

std::vector<attention_row> measure_attention(std::int64_t batch, std::int64_t heads,
                                             std::int64_t kv_heads,
                                             const std::vector<std::int64_t>& lengths, int e,
                                             const std::vector<std::string>& types, bool tokens,
                                             int context_parallel, int iters, int warmup) {
  if (kv_heads < 1 || heads % kv_heads != 0)
    throw std::invalid_argument("attention: --kv-heads " + std::to_string(kv_heads) +
                                " must divide --heads " + std::to_string(heads) +
                                " (each key head serves heads / kv-heads query heads)");
  if (e < 1 || e > kernels::fused_attention_max_head)
    throw std::invalid_argument("attention: head width -E " + std::to_string(e) +
                                "; the fused kernels take 1 to " +
                                std::to_string(kernels::fused_attention_max_head));
  for (const std::string& type : types)
    if (type != "bf16" && type != "fp32")
      throw std::invalid_argument("attention: unknown type " + type + " (bf16, fp32)");
  for (std::int64_t t_len : lengths)
    if (t_len % context_parallel != 0)
      throw std::invalid_argument("attention: --context-parallel " +
                                  std::to_string(context_parallel) + " does not divide T = " +
                                  std::to_string(t_len) + " into equal blocks of queries");
  std::vector<context_block> blocks = {{0, 1}};
  if (context_parallel > 1)
    for (int rank = 0; rank < context_parallel; ++rank) blocks.push_back({rank, context_parallel});
  std::vector<attention_row> rows;
  for (const std::string& type : types)
    for (std::int64_t t_len : lengths)
      for (const context_block& block : blocks)
        rows.push_back(type == "bf16" ? measure_one<bf16>(type, batch, heads, kv_heads, t_len,
                                                          block, e, tokens, iters, warmup)
                                      : measure_one<float>(type, batch, heads, kv_heads, t_len,
                                                           block, e, tokens, iters, warmup));
  return rows;
}

}  // namespace tpx::bench::cuda

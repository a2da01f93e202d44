// The measurements of tpx-bench-cuda, as plain functions and rows, so that the command line,
// the tables and the JSON (main.cpp, host code) stay out of the nvcc-compiled files that do the
// GPU work (gemm.cu, kernels.cu, attention.cu, attention_tilings.cu, collectives.cu), which keeps
// the CUDA build short.
//
// Every function needs a GPU; main.cpp checks for one first. Times are CUDA-event or
// synchronized wall-clock times of back-to-back calls after warm-up calls: the mean per call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tpx::bench::cuda {

// GEMM: C = A B, m = n = k = size, through tpx (the device space's gemm, as tpx::matmul calls
// it) and through cuBLASLt called directly with the same problem, in TFLOP/s (2mnk / t).
struct gemm_row {
  std::string type;  // fp32, tf32, bf16, fp16
  std::int64_t size = 0;
  double tpx_tflops = 0, direct_tflops = 0;
  double ratio = 0;     // tpx / direct (target >= 0.95)
  double max_diff = 0;  // largest |C_tpx - C_direct| (0: the same algorithm ran)
};
std::vector<gemm_row> measure_gemm(const std::vector<std::int64_t>& sizes, const std::vector<std::string>& types,
                                   int iters, int warmup);

// The MLP's up projection with GELU fused into the GEMM (the device space's gemm_gelu and
// gemm_gelu_backward, which nn::gelu_product calls: cuBLASLt's GELU_AUX and DGELU epilogues)
// against the GEMM followed by the elementwise kernel, as tpx::map would run it. Forward:
// pre = A[m, k] B[k, n], out = GELU(pre); backward: grad = (G[m, k] C[n, k]^T) * GELU'(pre).
struct gelu_row {
  std::string type;  // fp32 (TF32 products), bf16
  std::int64_t m = 0, n = 0, k = 0;
  double forward_fused_ms = 0, forward_unfused_ms = 0;    // per call
  double backward_fused_ms = 0, backward_unfused_ms = 0;  // per call
  // Largest |fused - unfused| over GELU's output and the gradient, divided by the largest
  // |unfused| there (cuBLASLt may evaluate tanh with a hardware approximation).
  double max_rel_diff = 0;
};
std::vector<gelu_row> measure_gelu(const std::vector<std::string>& shapes, const std::vector<std::string>& types,
                                   int iters, int warmup);

// Memory-bound kernels: effective bandwidth (the bytes each must read and write once, per second)
// against a device-to-device cudaMemcpyAsync of the same array (read + write).
struct bandwidth_row {
  std::string kernel;
  std::int64_t elements = 0;
  double bytes = 0;  // per call
  double microseconds = 0;
  double gbps = 0, memcpy_gbps = 0;
  double ratio = 0;  // gbps / memcpy_gbps (target >= 0.8 for elementwise and norms)
};
std::vector<bandwidth_row> measure_kernels(std::int64_t elements, std::int64_t row_length, int iters, int warmup);

// Fused causal attention alone (tpx::cuda::fused_attention_forward and _backward, the kernels
// under nn::fused_causal_attention_*), q, k, v [batch x heads, t_len, e] row-major or, with
// `tokens`, [batch, t_len, heads, e] as the GPT's layers pass them, scale 1/sqrt(e). TFLOP/s
// count FlashAttention's benchmarks' FLOPs: the forward 4 B H T^2 E / 2 (two matrix products,
// halved by the causal mask; a block of Tq queries from position f: 4 B H E Tq (f + Tq / 2)), the
// backward 2.5 times that; so the figures compare with PyTorch's SDPA timed the same way
// (bench/peers/torch_sdpa.py).
struct attention_row {
  std::string type;    // bf16, fp32
  std::string tiling;  // attention-tilings' rows: the tensor-core kernels' tilings; else empty
  // kv_heads < heads: grouped-query attention, heads / kv_heads query heads per key head.
  std::int64_t batch = 0, heads = 0, kv_heads = 0, t_len = 0;
  // The queries: rank `rank` of `ranks`' block of each sequence under context parallelism, T /
  // ranks rows from position rank T / ranks against all T keys; 0 of 1: the whole sequence.
  int rank = 0, ranks = 1;
  std::int64_t e = 0;
  double forward_ms = 0,
         backward_ms = 0;  // per call; the backward includes delta = rowdot(dout, out)
  double forward_tflops = 0, backward_tflops = 0;
  // Largest |device - host| over out, dq, dk and dv of the first sequence, divided by the largest
  // |host| there: the host twin (tensor/host_fused_attention.hpp) on the same inputs, so that a
  // fast kernel that computes something else shows.
  double max_rel_diff = 0;
};
// With context_parallel = X > 1, each length's whole-sequence row is followed by one row per
// rank's block of X (each length a multiple of X). kv_heads (dividing heads) key and value heads:
// grouped-query attention where fewer than heads, k and v [batch x kv_heads, t_len, e] (or
// [batch, t_len, kv_heads, e]); the FLOPs are the same, the keys' traffic a group's fraction.
std::vector<attention_row> measure_attention(std::int64_t batch, std::int64_t heads,
                                             std::int64_t kv_heads,
                                             const std::vector<std::int64_t>& lengths, int e,
                                             const std::vector<std::string>& types, bool tokens,
                                             int context_parallel, int iters, int warmup);
// The same rows, bf16, for the tensor-core kernels under each tiling attention_tilings.cu lists
// at head width e (64 or 128), the kernels' own first: `tiling` names the forward's, dq's and
// dk-dv's (R x Cols; "s": the queries in shared memory; "/3": at least 3 blocks per
// multiprocessor; kernels/flash_attention.hpp).
std::vector<attention_row> measure_attention_tilings(std::int64_t batch, std::int64_t heads,
                                                     const std::vector<std::int64_t>& lengths,
                                                     int e, bool tokens, int iters, int warmup);

// Collectives in nccl-tests' terms (bench/collectives.cpp says what size, algbw and busbw mean).
struct collective_row {
  std::string op, redop;
  int ranks = 0, root = -1;
  std::int64_t bytes = 0, count = 0;
  double oop_us = 0, oop_algbw = 0, oop_busbw = 0;
  std::int64_t oop_wrong = 0;
  bool has_in_place = false;
  double ip_us = 0, ip_algbw = 0, ip_busbw = 0;
  std::int64_t ip_wrong = 0;
};
enum class mesh_kind { simulated, nccl };
// Runs on `ranks` ranks of the simulated mesh (one GPU) or over NCCL (one GPU per rank); calls
// `row_done` with each row as it is measured (rank 0's thread), in op then size order.
void measure_collectives(mesh_kind kind, int ranks, const std::vector<std::int64_t>& sizes,
                         const std::vector<std::string>& ops, int iters, int warmup, bool check,
                         const std::function<void(const collective_row&)>& row_done);

}  // namespace tpx::bench::cuda

// tpx-bench-cuda kernels: the effective bandwidth of tpx's memory-bound kernels against a
// device-to-device copy of the same array (measure.hpp).
//
// Each kernel is charged the bytes it must move once: every input read and every output
// written, at its storage size (a kernel that rereads a row from cache is not credited for
// it). The copy moves 2 x 4 bytes per fp32 element (read and write); its rate is the practical
// ceiling, so ratio = kernel GB/s / copy GB/s says how close a kernel comes to it. The norms
// and softmax run on rows of `row_length` elements (a model's hidden size or vocabulary).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "measure.hpp"
#include "measuring.hpp"
#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/kernels/adamw.hpp"
#include "tpx/cuda/kernels/elementwise.hpp"
#include "tpx/cuda/kernels/grid.hpp"
#include "tpx/cuda/kernels/norms.hpp"
#include "tpx/cuda/kernels/scatter_rows.hpp"
#include "tpx/cuda/kernels/softmax.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/kernels/attention_terms.hpp"
#include "tpx/kernels/elementwise.hpp"
#include "tpx/kernels/grid_terms.hpp"
#include "tpx/kernels/layernorm.hpp"
#include "tpx/kernels/optimizer.hpp"
#include "tpx/kernels/permute.hpp"
#include "tpx/kernels/random.hpp"
#include "tpx/kernels/reduction.hpp"

namespace tpx::bench::cuda {

namespace cu = tpx::cuda;

std::vector<bandwidth_row> measure_kernels(std::int64_t n, std::int64_t d, int iters, int warmup) {
  cu::rank_resources r(0, {});
  const cudaStream_t s = r.stream();
  const std::int64_t rows = n / d;
  n = rows * d;  // whole rows
  auto x32 = random_buffer<float>(r, n, 1), y32 = random_buffer<float>(r, n, 2), z32 = random_buffer<float>(r, n, 3);
  auto x16 = random_buffer<bf16>(r, n, 4), y16 = random_buffer<bf16>(r, n, 5);
  auto w32 = random_buffer<float>(r, d, 6), b32 = random_buffer<float>(r, d, 7);
  cu::device_buffer<float> r_out(rows, r.pool(), s), losses(rows, r.pool(), s);
  cu::device_buffer<kernels::layernorm_stats> stats(rows, r.pool(), s);
  cu::device_buffer<std::int64_t> targets(rows, r.pool(), s);  // zeros: class 0
  auto m32 = random_buffer<float>(r, n, 8), v32 = random_buffer<float>(r, n, 9);
  TPX_CUDA_CHECK(cudaMemsetAsync(v32.data(), 0, n * sizeof(float), s));  // v >= 0

  const double copy_seconds = seconds_per_call(s, iters, warmup, [&] {
    TPX_CUDA_CHECK(cudaMemcpyAsync(y32.data(), x32.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  });
  const double copy_gbps = 2.0 * n * sizeof(float) / copy_seconds / 1e9;

  std::vector<bandwidth_row> rows_out;
  const auto add_row = [&](const std::string& name, double bytes_per_element, auto&& fn) {
    const double seconds = seconds_per_call(s, iters, warmup, fn);
    const double bytes = bytes_per_element * static_cast<double>(n);
    const double gbps = bytes / seconds / 1e9;
    rows_out.push_back({name, n, bytes, seconds * 1e6, gbps, copy_gbps, gbps / copy_gbps});
  };
  add_row("memcpy fp32", 8, [&] {
    TPX_CUDA_CHECK(cudaMemcpyAsync(y32.data(), x32.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  });
  add_row("add fp32", 12, [&] { cu::transform(s, n, kernels::add{}, z32.data(), x32.data(), y32.data()); });
  add_row("gelu fp32", 8, [&] { cu::transform(s, n, kernels::gelu{}, y32.data(), x32.data()); });
  add_row("gelu bf16", 4, [&] { cu::transform(s, n, kernels::gelu{}, y16.data(), x16.data()); });
  add_row("gelu_backward bf16", 6, [&] {
    cu::transform(s, n, kernels::gelu_backward{}, y16.data(), x16.data(), static_cast<const bf16*>(y16.data()));
  });
  add_row("bias add fp32", 8, [&] { cu::transform_rows(s, rows, d, kernels::add{}, y32.data(), x32.data(), b32.data()); });
  add_row("rmsnorm fwd bf16", 4, [&] { cu::rmsnorm_forward(s, rows, d, x16.data(), w32.data(), 1e-5f, y16.data(), r_out.data()); });
  add_row("rmsnorm fwd fp32", 8, [&] { cu::rmsnorm_forward(s, rows, d, x32.data(), w32.data(), 1e-5f, y32.data(), r_out.data()); });
  add_row("layernorm fwd bf16", 4, [&] {
    cu::layernorm_forward(s, rows, d, x16.data(), w32.data(), b32.data(), 1e-5f, y16.data(), stats.data());
  });
  add_row("layernorm bwd bf16", 6, [&] {
    cu::layernorm_backward(s, r.pool(), rows, d, x16.data(), w32.data(), stats.data(), y16.data(), y16.data(),
                           z32.data(), z32.data() + d);
  });
  add_row("rmsnorm bwd bf16", 6, [&] {
    cu::rmsnorm_backward(s, r.pool(), rows, d, x16.data(), w32.data(), r_out.data(), y16.data(), y16.data(), w32.data());
  });
  add_row("softmax fp32", 8, [&] { cu::softmax_forward(s, rows, d, x32.data(), y32.data()); });
  add_row("cross_entropy fwd fp32", 4, [&] {
    cu::cross_entropy_forward<float>(s, rows, d, x32.data(), targets.data(), losses.data(), nullptr);
  });
  // The heaviest pass of the trainers' vocab-parallel cross-entropy (nn/cross_entropy.hpp):
  // dlogits from the logits and each row's max and sum, a block per row in 16-byte vectors.
  cu::device_buffer<std::int32_t> tokens(rows, r.pool(), s);  // zeros: class 0
  TPX_CUDA_CHECK(cudaMemsetAsync(tokens.data(), 0, rows * sizeof(std::int32_t), s));
  add_row("cross_entropy grad bf16 (nn)", 4, [&] {
    cu::cross_entropy_gradient_rows(s, rows, d, x16.data(), r_out.data(), r_out.data(), {tokens.data(), 1, 0}, 0,
                                    1.0f, y16.data());
  });
  // The first pass of the same loss on the GPU: each row's max and sum of exps, in one read of
  // the logits (kernels/softmax_stats_rows.hpp).
  add_row("cross_entropy stats bf16 (nn, one pass)", 2, [&] {
    cu::softmax_stats_rows(s, rows, d, x16.data(), r_out.data(), losses.data());
  });
  // The layout copies of attention's operands (GPT-2's 12 heads of 64, T = 1024), as
  // tpx::permute and einsum make them: 16-byte vectors along E.
  const std::int64_t t_len = 1024, heads = 12, e = 64, batch = n / (t_len * heads * e);
  if (batch > 0) {
    const std::int64_t src_extent[4] = {batch, t_len, heads, e};
    const int order[4] = {0, 2, 1, 3};
    const auto f = kernels::permute_into<bf16>::of(x16.data(), src_extent, 4, order, y16.data());
    const std::int64_t copied = batch * t_len * heads * e;
    add_row("permute bf16 [B,T,H,E]->[B,H,T,E]", 4.0 * static_cast<double>(copied) / static_cast<double>(n),
            [&] { cu::for_each_element(s, copied / e, e, f); });
  }
  // The row statistics of the nn layers (cuda::reduce_rows, a warp per row of up to 1024
  // columns): RMSNorm's sum of squares over rows of GPT-2's width (the layer's first pass when D
  // is split), and fused attention's delta, dout . out over rows of one head.
  cu::device_buffer<float> row_stats(n / 64, r.pool(), s);
  const std::int64_t width = 768, width_rows = n / width;
  const double width_share = static_cast<double>(width_rows * width) / static_cast<double>(n);
  // RMSNorm as the trainers run it when a rank holds whole rows of GPT-2's width: a warp per
  // row, the row in registers (kernels/rmsnorm_warp_rows.hpp); the weight gradient summed in the
  // same pass.
  add_row("rmsnorm fwd bf16, rows of 768 (warp per row)", 4 * width_share, [&] {
    cu::rmsnorm_forward(s, width_rows, width, x16.data(), w32.data(), 1e-5f, y16.data(), row_stats.data());
  });
  add_row("rmsnorm bwd bf16, rows of 768 (warp per row)", 6 * width_share, [&] {
    cu::rmsnorm_backward(s, r.pool(), width_rows, width, x16.data(), w32.data(), row_stats.data(), y16.data(),
                         y16.data(), w32.data());
  });
  // LayerNorm at the same width (GPT-2's norm; kernels/layernorm_warp_rows.hpp).
  cu::device_buffer<kernels::layernorm_stats> width_stats(width_rows, r.pool(), s);
  add_row("layernorm fwd bf16, rows of 768 (warp per row)", 4 * width_share, [&] {
    cu::layernorm_forward(s, width_rows, width, x16.data(), w32.data(), b32.data(), 1e-5f, y16.data(),
                          width_stats.data());
  });
  add_row("layernorm bwd bf16, rows of 768 (warp per row)", 6 * width_share, [&] {
    cu::layernorm_backward(s, r.pool(), width_rows, width, x16.data(), w32.data(), width_stats.data(), y16.data(),
                           y16.data(), z32.data(), z32.data() + width);
  });
  add_row("row sum of squares bf16, rows of 768 (nn rmsnorm, D split)",
          2 * width_share, [&] {
            cu::reduce_rows<kernels::sum_of_squares_reducer<float>>(
                s, width_rows, width, kernels::element_at<bf16>{x16.data(), width},
                row_stats.data());
          });
  add_row("row dot bf16, rows of 64 (attention delta)", 4, [&] {
    cu::reduce_rows<kernels::sum_reducer<float>>(
        s, n / 64, 64, kernels::product_term<bf16>{x16.data(), y16.data(), 64}, row_stats.data());
  });
  // The embedding table's gradient of a GPT-2 batch of byte tokens (nn/embedding.hpp): rows of
  // 768 bf16 summed into 256 fp32 rows (z32's first 256 x 768 elements), 40 % of them into one
  // (the space), sorted by token first (cuda/kernels/scatter_rows.hpp). Charged the rows' bytes
  // once and the 256 rows read and written.
  if (n >= 256 * width) {
    std::vector<std::int32_t> byte_tokens(static_cast<std::size_t>(width_rows));
    for (std::int64_t i = 0; i < width_rows; ++i) {
      const kernels::philox_words draw =
          kernels::random_words_at(10, static_cast<std::uint64_t>(i));
      byte_tokens[i] = draw.w[0] % 10 < 4 ? 32 : static_cast<std::int32_t>(draw.w[1] % 256);
    }
    cu::device_buffer<std::int32_t> tokens_on_device(byte_tokens.size(), r.pool(), s);
    TPX_CUDA_CHECK(cudaMemcpyAsync(tokens_on_device.data(), byte_tokens.data(),
                                   byte_tokens.size() * sizeof(std::int32_t),
                                   cudaMemcpyHostToDevice, s));
    const double bytes = 2.0 * static_cast<double>(width_rows * width) + 8.0 * 256 * width;
    add_row("embedding gradient bf16, rows of 768 into 256 byte tokens",
            bytes / static_cast<double>(n), [&] {
              cu::scatter_add_rows(s, r.pool(), width_rows, width, 256,
                                   kernels::token_at{tokens_on_device.data(), 1, 0},
                                   kernels::element_at<bf16>{x16.data(), width}, z32.data());
            });
  }
  const kernels::adamw_update update{1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1.0f, 1.0f};
  add_row("adamw fp32 master, bf16 grad+model", 28, [&] {
    cu::adamw_step(s, n, update, nullptr, nullptr, z32.data(), static_cast<const bf16*>(x16.data()), m32.data(), v32.data(), y16.data());
  });
  r.synchronize();
  return rows_out;
}

}  // namespace tpx::bench::cuda

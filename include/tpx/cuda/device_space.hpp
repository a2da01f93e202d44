// device_space: where a device tensor keeps its elements (the memory of its rank's GPU), with
// the interface of host_space (tensor/host_space.hpp), so the collectives, reshard, matmul and
// the elementwise ops, written once against that interface, run on the GPU unchanged.
//
//   buffer<T>                   device_buffer<T>: pool memory, stream-ordered, zeroed (not
//                               by make_buffer_for_overwrite), counted on the rank's
//                               memory_meter
//   copy_box                    the pack/unpack of a box (cuda/kernels/copy_box.hpp)
//   gemm                        cuBLASLt (cuda/gemm.hpp); fp32 uses TF32 when the rank allows
//   gemm_gelu, gemm_gelu_backward   one cuBLASLt GEMM with the GELU_AUX / DGELU epilogue
//   transform                   the elementwise kernel running a kernels/ functor
//   to_host / from_host         to_host returns once the data has arrived; from_host returns
//                               at once, its bytes passing through the rank's pinned buffer
//                               (host_staging.hpp): the batch upload never stalls a step
//   fill_normal                 tpx::randn generated in place (cuda/kernels/random.hpp)
//   adamw                       the AdamW kernel (cuda/kernels/adamw.hpp)
//   sum_of_squares              cuda::reduce's two-pass fold, in fp32 (cuda/kernels/reduce.hpp):
//                               agrees with the host's double sum to n * 2^-24 relative
//   reduce_rows, for_each_element, sum_columns
//                               the grid loops of the layers (cuda/kernels/grid.hpp)
//   scatter_add_rows            the embeddings' gradients: rows sorted by destination, then
//                               summed in that order, no atomics (cuda/kernels/scatter_rows.hpp)
//   fused_attention_forward, fused_attention_backward
//                               fused causal attention (cuda/kernels/fused_attention.hpp)
//   rmsnorm_rows, rmsnorm_rows_backward
//                               RMSNorm over whole rows in one pass (cuda/kernels/norms.hpp),
//                               which nn/rmsnorm.hpp takes when each rank holds whole rows
//   softmax_stats_rows          each row's max and sum of exp(x - max) in one pass
//                               (cuda/kernels/softmax.hpp), nn/cross_entropy.hpp's first pass
//   cross_entropy_gradient_rows and its gradient pass, in 16-byte vectors
// host_space has none of the last three: the host keeps its grid loops, which its vector lanes
// run well.
//
// host_accessible is false: a device tensor's local() does not compile (tensor.hpp), so host code
// cannot read device memory by mistake; to_host / from_host are the named way across, refused
// while the rank's step is being recorded (rank_resources::record).
// Everything runs on the tensor's rank's current stream (rank_resources.hpp: its own, or its
// background lane's while a background task runs) and returns without waiting, except the
// copies to host memory (and uploads too large to stage). DeviceTensor<T, Spec...> is the tensor
// type; tpx's factories return it for a CUDA rank (cuda/device_rank.hpp).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/gemm.hpp"
#include "tpx/cuda/kernels/adamw.hpp"
#include "tpx/cuda/kernels/copy_box.hpp"
#include "tpx/cuda/kernels/elementwise.hpp"
#include "tpx/cuda/kernels/fused_attention.hpp"
#include "tpx/cuda/kernels/grid.hpp"
#include "tpx/cuda/kernels/norms.hpp"
#include "tpx/cuda/kernels/random.hpp"
#include "tpx/cuda/kernels/reduce.hpp"
#include "tpx/cuda/kernels/scatter_rows.hpp"
#include "tpx/cuda/kernels/softmax.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/spmd/rank_context.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

namespace cuda {

struct device_space {
  static constexpr bool host_accessible = false;

  template <class T>
  using buffer = device_buffer<T>;

  template <class T>
  static buffer<T> make_buffer(const rank_context& ctx, std::size_t n) {
    const rank_resources& r = resources_of(ctx);
    return buffer<T>(n, r.pool(), r.current_stream(), &ctx.memory());
  }
  template <class T>
  static buffer<T> make_buffer_for_overwrite(const rank_context& ctx, std::size_t n) {
    const rank_resources& r = resources_of(ctx);
    return buffer<T>::for_overwrite(n, r.pool(), r.current_stream(), &ctx.memory());
  }

  template <class T, std::size_t N>
  static void copy_box(const rank_context& ctx, const T* src, const std::array<std::int64_t, N>& src_shape,
                       const std::array<std::int64_t, N>& src_start, T* dst, const std::array<std::int64_t, N>& dst_shape,
                       const std::array<std::int64_t, N>& dst_start, const std::array<std::int64_t, N>& box) {
    cuda::copy_box(resources_of(ctx).stream(), src, src_shape, src_start, dst, dst_shape, dst_start, box);
  }

  template <class T>
  static void gemm(const rank_context& ctx, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                   float alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, float beta, T* c,
                   std::int64_t ldc) {
    rank_resources& r = resources_of(ctx);
    cuda::gemm(r.gemms(), r.stream(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
               gemm_options<T>{.tf32 = r.options().tf32});
  }

  template <class T>
  static void gemm_gelu(const rank_context& ctx, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                        std::int64_t k, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* out, T* pre) {
    rank_resources& r = resources_of(ctx);
    cuda::gemm_gelu(r.gemms(), r.stream(), trans_a, trans_b, m, n, k, a, lda, b, ldb, out, pre, r.options().tf32);
  }
  template <class T>
  static void gemm_gelu_backward(const rank_context& ctx, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                                 std::int64_t k, const T* a, std::int64_t lda, const T* b, std::int64_t ldb,
                                 const T* pre, T* out) {
    rank_resources& r = resources_of(ctx);
    cuda::gemm_gelu_backward(r.gemms(), r.stream(), trans_a, trans_b, m, n, k, a, lda, b, ldb, pre, out,
                             r.options().tf32);
  }

  // gemm on `batch` strided matrix triples (einsum): one cuBLASLt strided-batched call.
  template <class T>
  static void gemm_batched(const rank_context& ctx, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                           std::int64_t k, float alpha, const T* a, std::int64_t lda, std::int64_t stride_a, const T* b,
                           std::int64_t ldb, std::int64_t stride_b, float beta, T* c, std::int64_t ldc,
                           std::int64_t stride_c, std::int64_t batch) {
    rank_resources& r = resources_of(ctx);
    cuda::gemm_batched(r.gemms(), r.stream(), trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                       beta, c, ldc, stride_c, batch, gemm_options<T>{.tf32 = r.options().tf32});
  }

  template <class F, class Out, class... In>
  static void transform(const rank_context& ctx, std::size_t n, const F& f, Out* out, const In*... in) {
    cuda::transform(resources_of(ctx).stream(), static_cast<std::int64_t>(n), f, out, in...);
  }

  template <class T>
  static void to_host(const rank_context& ctx, const T* src, std::size_t n, T* dst) {
    const rank_resources& r = resources_of(ctx);
    if (r.recording())
      throw std::logic_error("tpx: rank " + std::to_string(ctx.world_rank()) + ": a step being recorded reads " +
                             std::to_string(n * sizeof(T)) +
                             " bytes of device memory on the host, which waits for work that has not run; read "
                             "the step's outputs after it");
    TPX_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, r.stream()));
    TPX_CUDA_CHECK(cudaStreamSynchronize(r.stream()));
  }
  template <class T>
  static void from_host(const rank_context& ctx, const T* src, std::size_t n, T* dst) {
    rank_resources& r = resources_of(ctx);
    if (r.recording())
      throw std::logic_error("tpx: rank " + std::to_string(ctx.world_rank()) + ": a step being recorded copies " +
                             std::to_string(n * sizeof(T)) +
                             " bytes from the host, which every replay would copy again as recorded; copy them "
                             "into the step's input before it (tpx::copy_from_host)");
    r.staging().upload(r.stream(), dst, src, n * sizeof(T));
  }

  template <class T, std::size_t N>
  static void fill_normal(const rank_context& ctx, T* out, const std::array<std::int64_t, N>& local,
                          const std::array<std::int64_t, N>& offsets, const std::array<std::int64_t, N>& global,
                          std::uint64_t seed, float scale) {
    cuda::fill_normal(resources_of(ctx).stream(), out, local, offsets, global, seed, scale);
  }

  template <class G>
  static void adamw(const rank_context& ctx, std::size_t n, const kernels::adamw_update& update, const float* step,
                    const float* scale, float* p, const G* g, float* m, float* v) {
    cuda::adamw_step(resources_of(ctx).stream(), static_cast<std::int64_t>(n), update, step, scale, p, g, m, v);
  }

  template <class T>
  static void sum_of_squares(const rank_context& ctx, std::size_t n, const T* x, float* out) {
    const rank_resources& r = resources_of(ctx);
    cuda::reduce(r.stream(), r.pool(), static_cast<std::int64_t>(n), x, kernels::sum_of_squares_reducer<float>{}, out);
  }

  template <class R, class Term>
  static void reduce_rows(const rank_context& ctx, std::int64_t rows, std::int64_t cols, const Term& term, float* out) {
    cuda::reduce_rows<R>(resources_of(ctx).stream(), rows, cols, term, out);
  }

  template <class Fn>
  static void for_each_element(const rank_context& ctx, std::int64_t rows, std::int64_t cols, const Fn& fn) {
    cuda::for_each_element(resources_of(ctx).stream(), rows, cols, fn);
  }

  template <class Term>
  static void sum_columns(const rank_context& ctx, std::int64_t rows, std::int64_t cols, const Term& term, float* out) {
    const rank_resources& r = resources_of(ctx);
    cuda::sum_columns(r.stream(), r.pool(), rows, cols, term, out);
  }

  // RMSNorm over whole rows of d (nn/rmsnorm.hpp calls these when its normalized dim is not
  // split): y and rstd; then dx, and dw += the sum over rows of dy x rstd.
  template <class T, class W>
  static void rmsnorm_rows(const rank_context& ctx, std::int64_t rows, std::int64_t d, const T* x, const W* w,
                           float eps, T* y, float* rstd) {
    cuda::rmsnorm_forward(resources_of(ctx).stream(), rows, d, x, w, eps, y, rstd);
  }
  template <class T, class W>
  static void rmsnorm_rows_backward(const rank_context& ctx, std::int64_t rows, std::int64_t d, const T* x,
                                    const W* w, const float* rstd, const T* dy, T* dx, float* dw) {
    const rank_resources& r = resources_of(ctx);
    cuda::rmsnorm_backward(r.stream(), r.pool(), rows, d, x, w, rstd, dy, dx, dw);
  }

  // Each row's softmax stats, max and sum of exp(x - max), in one pass over the logits
  // (nn/cross_entropy.hpp calls it for each rank's block of the vocabulary).
  template <class T>
  static void softmax_stats_rows(const rank_context& ctx, std::int64_t rows, std::int64_t cols, const T* logits,
                                 float* max, float* sum) {
    cuda::softmax_stats_rows(resources_of(ctx).stream(), rows, cols, logits, max, sum);
  }
  // Then the loss's gradient over the rank's block [first, first + cols) of the vocabulary, from
  // the whole rows' stats, a 16-byte vector at a time.
  template <class T>
  static void cross_entropy_gradient_rows(const rank_context& ctx, std::int64_t rows, std::int64_t cols,
                                          const T* logits, const float* max, const float* sum,
                                          kernels::token_at target, std::int64_t first, float dloss, T* dlogits) {
    cuda::cross_entropy_gradient_rows(resources_of(ctx).stream(), rows, cols, logits, max, sum, target, first, dloss,
                                      dlogits);
  }

  template <class Index, class Term>
  static void scatter_add_rows(const rank_context& ctx, std::int64_t rows, std::int64_t cols,
                               std::int64_t out_rows, const Index& index, const Term& term,
                               float* out) {
    const rank_resources& r = resources_of(ctx);
    cuda::scatter_add_rows(r.stream(), r.pool(), rows, cols, out_rows, index, term, out);
  }

  template <class T>
  static void fused_attention_forward(const rank_context& ctx, std::int64_t sequences,
                                      kernels::attention_shape shape, int e, float scale,
                                      const T* q, const T* k, const T* v, T* out, float* lse) {
    cuda::fused_attention_forward(resources_of(ctx).stream(), sequences, shape, e, scale, q, k, v,
                                  out, lse);
  }
  template <class T>
  static void fused_attention_backward(const rank_context& ctx, std::int64_t sequences,
                                       kernels::attention_shape shape, int e, float scale,
                                       const T* q, const T* k, const T* v, const T* dout,
                                       const float* lse, const float* delta, T* dq, T* dk, T* dv) {
    cuda::fused_attention_backward(resources_of(ctx).stream(), sequences, shape, e, scale, q, k, v,
                                   dout, lse, delta, dq, dk, dv);
  }
};

}  // namespace cuda

// A tensor in device memory: tpx::Tensor's device twin.
template <class T, class... Spec>
using DeviceTensor = BasicTensor<cuda::device_space, T, Spec...>;

}  // namespace tpx

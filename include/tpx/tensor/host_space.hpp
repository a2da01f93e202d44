// host_space: where tpx::Tensor keeps its elements (host memory), and the three things every
// memory space provides to the rest of tpx.
//
// A Space is a class of static functions, chosen by the tensor type (BasicTensor<Space, T, ...>)
// so that the memory a pointer refers to is never in doubt:
//   buffer<T>                   an owning, contiguous allocation with data() and size()
//   make_buffer<T>(ctx, n)      n zero elements, allocated the space's way (for a GPU: on the
//                               rank's stream, from a pool) and counted on the rank's
//                               memory_meter; out of memory, allocation_error
//   make_buffer_for_overwrite<T>(ctx, n)   the same without the zeros: n elements of unspecified
//                               value, for outputs that are then written whole
//   copy_box(ctx, ...)          tensor/box_copy.hpp's copy between two arrays of the space
//   gemm(ctx, ...)              the local matrix product, row-major, BLAS conventions
//   gemm_batched(ctx, ...)      gemm on a batch of matrices at fixed strides (ops/einsum.hpp)
//   gemm_gelu(ctx, ..., out, pre)   pre = the product, out = kernels::gelu of it (contiguous)
//   gemm_gelu_backward(ctx, ..., pre, out)   out = the product times GELU's slope at pre,
//                               kernels::gelu_backward (nn/gelu_product.hpp; one fused GEMM
//                               on the GPU, cuBLASLt's GELU epilogues)
//   transform(ctx, n, f, out, in...)   out[i] = f(in[i]...), f a kernels/ functor
//   to_host / from_host         copies between the space and host memory
//   adamw(ctx, n, update, step, scale, p, g, m, v)   kernels/optimizer.hpp's AdamW step on n
//                               parameters, the gradient multiplied by *scale, at step *step
//                               (both in the space; a null step: update's bias corrections)
//   sum_of_squares(ctx, n, x, out)      *out (in the space) = the sum of x[i]^2
// and, for the layers of nn/ (norms, losses, embeddings), four loops over a rows x cols grid
// whose per-element math is a kernels/ functor of (r, c):
//   reduce_rows<R>(ctx, rows, cols, term, out)     out[r] = R-fold over c of term(r, c)
//   for_each_element(ctx, rows, cols, fn)          fn(r, c) everywhere (fn stores its results;
//                                                  no (r, c) may depend on another, as on a GPU)
//   sum_columns(ctx, rows, cols, term, out)        out[c] += sum over r of term(r, c)
//   scatter_add_rows(ctx, rows, cols, out_rows, index, term, out)
//                                                  out[index(r) * cols + c] += term(r, c), out
//                                                  [out_rows, cols], rows in order
// and the causal softmax of attention's scores (nn/attention.hpp), which the host runs a row at a
// time over the visible keys where a space without it (the GPU's) runs the grid loops above with
// kernels/attention_terms.hpp's functors, to the same bits (tensor/host_causal_softmax.hpp):
//   causal_softmax_rows(ctx, rows, keys, block, scale, x)
//                                                  x [rows, keys] scores -> probabilities, row r
//                                                  seeing keys <= block.last_visible(r)
// and fused causal attention over [sequences, T, E] (nn/fused_attention.hpp), whose row math is
// kernels/fused_attention.hpp's:
//   fused_attention_forward(ctx, sequences, shape, e, scale, q, k, v, out, lse)
//   fused_attention_backward(ctx, sequences, shape, e, scale, q, k, v, dout, lse, delta,
//                            dq, dk, dv)
// The collectives, reshard, matmul and the layers are written once against this interface; the
// CUDA backend adds a device space with the same functions. host_accessible says that the host
// may read the space's memory, which is what lets Tensor::local() compile (tensor.hpp).
//
// The loops over independent elements are kernels::for_each_index (kernels/host_loop.hpp), which
// compilers vectorize at -O2; the reductions fold in a fixed order, noted at each.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>

#include "tpx/kernels/elementwise.hpp"
#include "tpx/kernels/gemm_host.hpp"
#include "tpx/kernels/host_loop.hpp"
#include "tpx/kernels/optimizer.hpp"
#include "tpx/kernels/permute.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/spmd/rank_context.hpp"
#include "tpx/tensor/allocation_error.hpp"
#include "tpx/tensor/box_copy.hpp"
#include "tpx/tensor/host_buffer.hpp"
#include "tpx/tensor/host_causal_softmax.hpp"
#include "tpx/tensor/host_fused_attention.hpp"

namespace tpx {

struct host_space {
  static constexpr bool host_accessible = true;

  template <class T>
  using buffer = host_buffer<T>;

  // n zero elements; out of memory, an allocation_error saying how many bytes were asked for.
  template <class T>
  static buffer<T> make_buffer(const rank_context& ctx, std::size_t n) {
    return allocate<T>(n, [&] { return buffer<T>(n, T{}, metered<T>(ctx)); });
  }
  // The same without the zeros.
  template <class T>
  static buffer<T> make_buffer_for_overwrite(const rank_context& ctx, std::size_t n) {
    return allocate<T>(n, [&] { return buffer<T>(n, metered<T>(ctx)); });
  }

  template <class T, std::size_t N>
  static void copy_box(const rank_context&, const T* src, const index_array<N>& src_shape,
                       const index_array<N>& src_start, T* dst, const index_array<N>& dst_shape,
                       const index_array<N>& dst_start, const index_array<N>& box) {
    tpx::copy_box(src, src_shape, src_start, dst, dst_shape, dst_start, box);
  }

  template <class T>
  static void gemm(const rank_context&, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                   std::int64_t k, float alpha, const T* a, std::int64_t lda, const T* b,
                   std::int64_t ldb, float beta, T* c, std::int64_t ldc) {
    kernels::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  // gemm on `batch` matrix triples, the i-th at a + i * stride_a, b + i * stride_b and
  // c + i * stride_c (einsum's batched contractions): a loop of gemm, one BLAS call each.
  template <class T>
  static void gemm_batched(const rank_context& ctx, bool trans_a, bool trans_b, std::int64_t m,
                           std::int64_t n, std::int64_t k, float alpha, const T* a,
                           std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb,
                           std::int64_t stride_b, float beta, T* c, std::int64_t ldc,
                           std::int64_t stride_c, std::int64_t batch) {
    for (std::int64_t i = 0; i < batch; ++i)
      gemm(ctx, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb,
           beta, c + i * stride_c, ldc);
  }

  // pre[m, n] = op(a) op(b), out[m, n] = gelu(pre): the product, then the elementwise loop.
  template <class T>
  static void gemm_gelu(const rank_context& ctx, bool trans_a, bool trans_b, std::int64_t m,
                        std::int64_t n, std::int64_t k, const T* a, std::int64_t lda, const T* b,
                        std::int64_t ldb, T* out, T* pre) {
    gemm(ctx, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, pre, std::max<std::int64_t>(n, 1));
    kernels::transform(m * n, kernels::gelu{}, out, static_cast<const T*>(pre));
  }
  // out[m, n] = (op(a) op(b)) * gelu'(pre), in place in out.
  template <class T>
  static void gemm_gelu_backward(const rank_context& ctx, bool trans_a, bool trans_b,
                                 std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
                                 std::int64_t lda, const T* b, std::int64_t ldb, const T* pre,
                                 T* out) {
    gemm(ctx, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, out, std::max<std::int64_t>(n, 1));
    kernels::transform(m * n, kernels::gelu_backward{}, out, pre, static_cast<const T*>(out));
  }

  template <class F, class Out, class... In>
  static void transform(const rank_context&, std::size_t n, const F& f, Out* out, const In*... in) {
    kernels::transform(static_cast<std::int64_t>(n), f, out, in...);
  }

  template <class T>
  static void to_host(const rank_context&, const T* src, std::size_t n, T* dst) {
    std::copy_n(src, n, dst);
  }
  template <class T>
  static void from_host(const rank_context&, const T* src, std::size_t n, T* dst) {
    std::copy_n(src, n, dst);
  }

  template <class G>
  static void adamw(const rank_context&, std::size_t n, const kernels::adamw_update& update,
                    const float* step, const float* scale, float* p, const G* g, float* m,
                    float* v) {
    const kernels::adamw_update stepped = update.read(step, scale);
    kernels::for_each_index(static_cast<std::int64_t>(n), [=](std::int64_t i) {
      stepped(p[i], static_cast<float>(g[i]), m[i], v[i]);
    });
  }

  // Accumulated in double (kernels/reduction.hpp), in fold_in_lanes' fixed order.
  template <class T>
  static void sum_of_squares(const rank_context&, std::size_t n, const T* x, float* out) {
    using R = kernels::sum_of_squares_reducer<double>;
    *out = static_cast<float>(kernels::fold_in_lanes<R>(
        static_cast<std::int64_t>(n),
        [=](std::int64_t i) { return R::element(static_cast<float>(x[i])); }));
  }

  // Each row folded in R::value_type, in fold_in_lanes' fixed order.
  template <class R, class Term>
  static void reduce_rows(const rank_context&, std::int64_t rows, std::int64_t cols,
                          const Term& term, float* out) {
    for (std::int64_t r = 0; r < rows; ++r)
      out[r] = static_cast<float>(
          kernels::fold_in_lanes<R>(cols, [=](std::int64_t c) { return R::element(term(r, c)); }));
  }

  // A permute (kernels::permute_into) is copied row by row, its rows located without division.
  template <class Fn>
  static void for_each_element(const rank_context&, std::int64_t rows, std::int64_t cols,
                               const Fn& fn) {
    if constexpr (kernels::is_permute_into_v<Fn>)
      fn.copy_rows(rows);
    else
      for (std::int64_t r = 0; r < rows; ++r)
        kernels::for_each_index(cols, [=](std::int64_t c) { fn(r, c); });
  }

  // Rows in order, in fp32.
  template <class Term>
  static void sum_columns(const rank_context&, std::int64_t rows, std::int64_t cols,
                          const Term& term, float* out) {
    for (std::int64_t r = 0; r < rows; ++r)
      kernels::for_each_index(cols, [=](std::int64_t c) { out[c] += term(r, c); });
  }

  template <class Index, class Term>
  static void scatter_add_rows(const rank_context&, std::int64_t rows, std::int64_t cols,
                               std::int64_t /*out_rows*/, const Index& index, const Term& term,
                               float* out) {
    for (std::int64_t r = 0; r < rows; ++r) {
      float* row = out + index(r) * cols;
      kernels::for_each_index(cols, [=](std::int64_t c) { row[c] += term(r, c); });
    }
  }

  template <class T>
  static void causal_softmax_rows(const rank_context&, std::int64_t rows, std::int64_t keys,
                                  kernels::query_block block, float scale, T* x) {
    detail::host_causal_softmax_rows(rows, keys, block, scale, x);
  }

  template <class T>
  static void fused_attention_forward(const rank_context&, std::int64_t sequences,
                                      kernels::attention_shape shape, int e, float scale,
                                      const T* q, const T* k, const T* v, T* out, float* lse) {
    detail::host_fused_attention_forward(sequences, shape, e, scale, q, k, v, out, lse);
  }
  template <class T>
  static void fused_attention_backward(const rank_context&, std::int64_t sequences,
                                       kernels::attention_shape shape, int e, float scale,
                                       const T* q, const T* k, const T* v, const T* dout,
                                       const float* lse, const float* delta, T* dq, T* dk, T* dv) {
    detail::host_fused_attention_backward(sequences, shape, e, scale, q, k, v, dout, lse, delta,
                                          dq, dk, dv);
  }

 private:
  // The allocator that counts on the rank's memory_meter.
  template <class T>
  static for_overwrite_allocator<T> metered(const rank_context& ctx) {
    return for_overwrite_allocator<T>(&ctx.memory());
  }
  template <class T, class Make>
  static buffer<T> allocate(std::size_t n, const Make& make) {
    try {
      return make();
    } catch (const std::bad_alloc&) {
      throw allocation_error(n, sizeof(T), "host memory");
    }
  }
};

}  // namespace tpx

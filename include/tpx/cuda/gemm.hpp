// The device GEMM: C = alpha * op(A) * op(B) + beta * C on one rank's shards, row-major, with
// BLAS conventions (the same arguments as kernels::gemm on the host), through cuBLASLt.
//
// Element types: float (fp32, or TF32 tensor cores when options.tf32 is set), tpx::bf16 and
// __half; accumulation is always fp32 (CUBLAS_COMPUTE_32F*) and alpha, beta are floats. An
// epilogue (gemm_plan.hpp) can fuse a bias add and/or the tanh GELU into the store; gemm_gelu and
// gemm_gelu_backward are an MLP's up projection and its gradient with GELU fused that way. The plan of
// each distinct shape is made once and cached in the rank's gemm_plans, and every call uses the
// rank's single workspace, on the rank's stream; the call is asynchronous like a kernel launch.
// Each call is an NVTX range named after its shape (the plan's name, made once).
//
// Arguments are checked as on the host (the same messages); k == 0 gives C = beta * C without
// cuBLASLt, supported for beta == 0 and for contiguous C (ldc == n).
#pragma once

#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/gemm_plan.hpp"
#include "tpx/cuda/kernels/elementwise.hpp"
#include "tpx/cuda/nvtx.hpp"
#include "tpx/kernels/elementwise.hpp"
#include "tpx/kernels/gemm_host.hpp"

namespace tpx::cuda {

template <class T>
concept GemmElement = std::same_as<T, float> || std::same_as<T, bf16> || std::same_as<T, __half>;

template <GemmElement T>
inline constexpr cudaDataType_t blas_type = std::same_as<T, float> ? CUDA_R_32F
                                            : std::same_as<T, bf16> ? CUDA_R_16BF
                                                                    : CUDA_R_16F;

template <class T>
struct gemm_options {
  bool tf32 = false;  // fp32 inputs only: multiply on TF32 tensor cores (10-bit mantissas)
  gemm_epilogue epilogue = gemm_epilogue::none;
  const T* bias = nullptr;  // n elements, for the bias epilogues
  T* aux = nullptr;         // m x n, leading dimension ldc, for gelu_aux (written) and dgelu (read)
};

// The key of this call's plan.
template <GemmElement T>
gemm_key gemm_key_of(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
                     std::int64_t lda, const T* b, std::int64_t ldb, const T* c, std::int64_t ldc,
                     const gemm_options<T>& options) {
  return {.type = blas_type<T>,
          .compute = std::same_as<T, float> && options.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
          .trans_a = trans_a,
          .trans_b = trans_b,
          .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
          .epilogue = options.epilogue,
          .align_a = alignment_of(a),
          .align_b = alignment_of(b),
          .align_c = alignment_of(c)};
}

namespace detail {

// One cublasLtMatmul of plan, with this call's epilogue pointers.
template <GemmElement T>
void run_plan(gemm_plans& plans, const gemm_plan& plan, cudaStream_t stream, float alpha, const T* a, const T* b,
              float beta, T* c, const gemm_options<T>& options) {
  const nvtx_range range(plan.name());
  if (has_bias(options.epilogue)) {
    const void* bias = options.bias;
    TPX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  if (has_aux(options.epilogue)) {
    void* aux = options.aux;
    TPX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  }
  // cuBLASLt's A is our B and its B our A (gemm_plan.hpp).
  TPX_CUBLAS_CHECK(cublasLtMatmul(plans.handle(), plan.desc(), &alpha, b, plan.a(), a, plan.b(), &beta, c, plan.c(), c,
                                  plan.c(), &plan.algo(), plans.workspace(), plans.workspace_bytes(), stream));
}

// C = the product with a GELU auxiliary epilogue (C and the auxiliary matrix contiguous), if
// cuBLASLt can: an auxiliary leading dimension that is a multiple of 8 and a 16-byte aligned
// auxiliary matrix, as cublasLt.h asks, and an algorithm. False, having done nothing, otherwise.
template <GemmElement T>
bool run_fused(gemm_plans& plans, cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
               std::int64_t k, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,
               const gemm_options<T>& options) {
  kernels::gemm_detail::check_arguments(trans_a, trans_b, m, n, k, lda, ldb, n);
  if (m == 0 || n == 0 || k == 0 || n % 8 != 0 || alignment_of(options.aux) < 16) return false;
  const gemm_plan* plan = plans.plan_if_any(gemm_key_of(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, n, options));
  if (plan == nullptr) return false;
  run_plan(plans, *plan, stream, 1.0f, a, b, 0.0f, c, options);
  return true;
}

}  // namespace detail

// C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C[m,n] (+ epilogue), on `stream`.
template <GemmElement T>
void gemm(gemm_plans& plans, cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
          std::int64_t k, float alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, float beta, T* c,
          std::int64_t ldc, const gemm_options<T>& options = {}) {
  kernels::gemm_detail::check_arguments(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (has_bias(options.epilogue) && options.bias == nullptr)
    throw std::invalid_argument("tpx: gemm: a bias epilogue needs a bias");
  if (has_aux(options.epilogue) && options.aux == nullptr)
    throw std::invalid_argument("tpx: gemm: a GELU auxiliary epilogue needs its matrix");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (options.epilogue != gemm_epilogue::none)
      throw std::invalid_argument("tpx: gemm: an epilogue needs k > 0");
    if (beta == 0.0f) {
      TPX_CUDA_CHECK(cudaMemset2DAsync(c, ldc * sizeof(T), 0, n * sizeof(T), m, stream));
    } else if (ldc == n) {
      transform(stream, m * n, kernels::scale{beta}, c, static_cast<const T*>(c));
    } else {
      throw std::invalid_argument("tpx: gemm: k == 0 with beta != 0 needs ldc == n");
    }
    return;
  }
  const gemm_key key = gemm_key_of(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, options);
  detail::run_plan(plans, plans.plan(key), stream, alpha, a, b, beta, c, options);
}

// C[m,n] = GELU(op(A) op(B)), and pre[m,n] = op(A) op(B), GELU's input for the backward pass
// (kernels::gelu; C and pre contiguous, ldc == n): one GEMM with cuBLASLt's GELU_AUX epilogue
// where it applies (n a multiple of 8, pre 16-byte aligned, an algorithm for the shape),
// otherwise the GEMM into pre and the elementwise kernel, which compute the same function.
template <GemmElement T>
void gemm_gelu(gemm_plans& plans, cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
               std::int64_t k, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, T* pre,
               bool tf32 = false) {
  const gemm_options<T> fused{.tf32 = tf32, .epilogue = gemm_epilogue::gelu_aux, .aux = pre};
  if (!detail::run_fused(plans, stream, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, fused)) {
    gemm(plans, stream, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, pre, n, {.tf32 = tf32});
    transform(stream, m * n, kernels::gelu{}, c, static_cast<const T*>(pre));
  }
}

// C[m,n] = (op(A) op(B)) * GELU'(pre), pre GELU's input saved by gemm_gelu (kernels::gelu_backward;
// C and pre contiguous): cuBLASLt's DGELU epilogue where it applies, as for gemm_gelu, otherwise
// the GEMM and the elementwise kernel.
template <GemmElement T>
void gemm_gelu_backward(gemm_plans& plans, cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m,
                        std::int64_t n, std::int64_t k, const T* a, std::int64_t lda, const T* b, std::int64_t ldb,
                        const T* pre, T* c, bool tf32 = false) {
  const gemm_options<T> fused{.tf32 = tf32, .epilogue = gemm_epilogue::dgelu, .aux = const_cast<T*>(pre)};
  if (!detail::run_fused(plans, stream, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, fused)) {
    gemm(plans, stream, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n, {.tf32 = tf32});
    transform(stream, m * n, kernels::gelu_backward{}, c, pre, static_cast<const T*>(c));
  }
}

// The same product on `batch` matrix triples, the i-th at a + i * stride_a, b + i * stride_b and
// c + i * stride_c (strides in elements, non-negative): one cuBLASLt call with strided-batch
// layouts (gemm_plan.hpp), for einsum's batched contractions. No epilogue (it would need batch
// strides for the bias). batch == 1 is gemm itself; k == 0 loops gemm's k == 0 path per batch.
// The alignment in the plan's key is the worst of the base pointer's and the stride's, so every
// matrix of the batch satisfies what the chosen algorithm assumes.
template <GemmElement T>
void gemm_batched(gemm_plans& plans, cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                  std::int64_t k, float alpha, const T* a, std::int64_t lda, std::int64_t stride_a, const T* b,
                  std::int64_t ldb, std::int64_t stride_b, float beta, T* c, std::int64_t ldc, std::int64_t stride_c,
                  std::int64_t batch, const gemm_options<T>& options = {}) {
  if (options.epilogue != gemm_epilogue::none)
    throw std::invalid_argument("tpx: gemm_batched: epilogues are not supported on batches");
  if (batch < 0 || batch > std::numeric_limits<std::int32_t>::max() || stride_a < 0 || stride_b < 0 || stride_c < 0)
    throw std::invalid_argument("tpx: gemm_batched: batch = " + std::to_string(batch) + ", strides " +
                                std::to_string(stride_a) + ", " + std::to_string(stride_b) + ", " +
                                std::to_string(stride_c) + ": the batch must fit int32 and strides be non-negative");
  if (batch == 1) {
    gemm(plans, stream, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, options);
    return;
  }
  kernels::gemm_detail::check_arguments(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < batch; ++i)
      gemm(plans, stream, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c + i * stride_c, ldc, options);
    return;
  }
  gemm_key key = gemm_key_of(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, options);
  key.batch = batch;
  key.stride_a = stride_a;
  key.stride_b = stride_b;
  key.stride_c = stride_c;
  key.align_a = std::min(key.align_a, alignment_of_bytes(static_cast<std::uint64_t>(stride_a) * sizeof(T)));
  key.align_b = std::min(key.align_b, alignment_of_bytes(static_cast<std::uint64_t>(stride_b) * sizeof(T)));
  key.align_c = std::min(key.align_c, alignment_of_bytes(static_cast<std::uint64_t>(stride_c) * sizeof(T)));
  detail::run_plan(plans, plans.plan(key), stream, alpha, a, b, beta, c, options);
}

}  // namespace tpx::cuda

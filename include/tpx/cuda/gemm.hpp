// The device GEMM: C = alpha * op(A) * op(B) + beta * C on one rank's shards, row-major, with
// BLAS conventions (the same arguments as kernels::gemm on the host), through cuBLASLt.
//
// Element types: float (fp32, or TF32 tensor cores when options.tf32 is set), tpx::bf16 and
// __half; accumulation is always fp32 (CUBLAS_COMPUTE_32F*) and alpha, beta are floats. An
// epilogue (gemm_plan.hpp) can fuse a bias add and/or the tanh GELU into the store. The plan of
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

#include <concepts>
#include <cstdint>
#include <stdexcept>

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

// C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C[m,n] (+ epilogue), on `stream`.
template <GemmElement T>
void gemm(gemm_plans& plans, cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
          std::int64_t k, float alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, float beta, T* c,
          std::int64_t ldc, const gemm_options<T>& options = {}) {
  kernels::gemm_detail::check_arguments(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  const bool has_bias = options.epilogue == gemm_epilogue::bias || options.epilogue == gemm_epilogue::bias_gelu;
  if (has_bias && options.bias == nullptr) throw std::invalid_argument("tpx: gemm: a bias epilogue needs a bias");
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
  const gemm_plan& plan = plans.plan(key);
  const nvtx_range range(plan.name());
  if (has_bias) {
    const void* bias = options.bias;
    TPX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  // cuBLASLt's A is our B and its B our A (gemm_plan.hpp).
  TPX_CUBLAS_CHECK(cublasLtMatmul(plans.handle(), plan.desc(), &alpha, b, plan.a(), a, plan.b(), &beta, c, plan.c(), c,
                                  plan.c(), &plan.algo(), plans.workspace(), plans.workspace_bytes(), stream));
}

}  // namespace tpx::cuda

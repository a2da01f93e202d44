// The local matrix multiply of the host backend: C = alpha * op(A) * op(B) + beta * C on one
// rank's shards, through CBLAS (OpenBLAS on Debian; link with -lopenblas).
//
// Every tpx matmul, whatever the sharding, ends in one call of this function on local blocks;
// ops/ decides which blocks and which collectives surround it. The interface is BLAS's,
// restated row-major in tpx's integer type: op(A) is m x k, op(B) is k x n, C is m x n, and
// op(X) is X or its transpose, chosen by a flag. A transposed operand is handed to BLAS as a
// flag, never copied. lda, ldb, ldc are the row strides of the matrices as stored: for A that
// is at least k (or m when trans_a), for B at least n (or k when trans_b), for C at least n.
//
// float goes straight to cblas_sgemm. bf16 is a storage type only (core/bfloat16.hpp): A, B and,
// when beta != 0, C are widened to fp32 scratch buffers, sgemm runs in fp32, and each result is
// rounded to bf16 once, when it is stored into C. So a bf16 gemm carries no more error than the
// fp32 one plus one rounding of the output, at the price of three temporary fp32 copies.
//
// As in BLAS, beta == 0 means C is write-only: its old contents (even NaN) are ignored. An empty
// product (k == 0) makes C = beta * C without calling BLAS; m == 0 or n == 0 does nothing.
// C must not overlap A or B. Sizes and strides are checked before BLAS sees them: a bad
// argument throws std::invalid_argument instead of OpenBLAS's print-and-return, and a work
// buffer OpenBLAS could not allocate throws blas_buffer_error instead of spinning
// (kernels/blas_work_buffers.hpp).
//
// This header is host-only; device code must not include it.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpx/core/bfloat16.hpp"
#include "tpx/kernels/blas_work_buffers.hpp"

namespace tpx::kernels {

namespace gemm_detail {

[[noreturn]] inline void fail(const std::string& what) { throw std::invalid_argument("tpx: gemm: " + what); }

// CBLAS takes sizes and strides as int (blasint) in the usual LP64 builds of OpenBLAS.
inline int to_blas_int(std::int64_t v, const char* name) {
  if (v < 0 || v > std::numeric_limits<int>::max()) {
    fail(std::string(name) + " = " + std::to_string(v) + " is negative or exceeds BLAS's int range");
  }
  return static_cast<int>(v);
}

// A row stride must cover the columns of the matrix as stored, and be at least 1 (as in BLAS).
inline void check_leading_dimension(std::int64_t ld, std::int64_t stored_cols, const char* name) {
  const std::int64_t needed = std::max<std::int64_t>(stored_cols, 1);
  if (ld < needed) {
    fail(std::string(name) + " = " + std::to_string(ld) + ", but the matrix as stored has " +
         std::to_string(stored_cols) + " columns: it must be at least " + std::to_string(needed));
  }
}

// Rejects what BLAS would reject (or silently misread) before any memory is touched.
inline void check_arguments(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                            std::int64_t lda, std::int64_t ldb, std::int64_t ldc) {
  to_blas_int(m, "m");
  to_blas_int(n, "n");
  to_blas_int(k, "k");
  to_blas_int(lda, "lda");
  to_blas_int(ldb, "ldb");
  to_blas_int(ldc, "ldc");
  check_leading_dimension(lda, trans_a ? m : k, "lda");
  check_leading_dimension(ldb, trans_b ? k : n, "ldb");
  check_leading_dimension(ldc, n, "ldc");
}

inline CBLAS_TRANSPOSE blas_op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

// A rows x cols bf16 matrix with row stride ld, widened into a packed fp32 copy (row stride cols).
inline std::vector<float> widen(const bf16* x, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) out[static_cast<std::size_t>(r * cols + c)] = x[r * ld + c];
  }
  return out;
}

}  // namespace gemm_detail

// C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C[m,n], all row-major (see the top of file).
inline void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                 std::int64_t ldc) {
  gemm_detail::check_arguments(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  const blas_entry inside_blas;
  cblas_sgemm(CblasRowMajor, gemm_detail::blas_op(trans_a), gemm_detail::blas_op(trans_b), static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}

// The same product for bf16 storage: fp32 scratch, one sgemm, one rounding into C.
inline void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                 const bf16* a, std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, bf16* c,
                 std::int64_t ldc) {
  gemm_detail::check_arguments(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  const std::int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;  // A as stored
  const std::int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;  // B as stored
  const std::vector<float> a32 = gemm_detail::widen(a, a_rows, a_cols, lda);
  const std::vector<float> b32 = gemm_detail::widen(b, b_rows, b_cols, ldb);
  std::vector<float> c32 =
      beta == 0.0f ? std::vector<float>(static_cast<std::size_t>(m * n)) : gemm_detail::widen(c, m, n, ldc);
  gemm(trans_a, trans_b, m, n, k, alpha, a32.data(), std::max<std::int64_t>(a_cols, 1), b32.data(),
       std::max<std::int64_t>(b_cols, 1), beta, c32.data(), n);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = c32[static_cast<std::size_t>(i * n + j)];
  }
}

}  // namespace tpx::kernels

// The device GEMM (cuBLASLt through tpx/cuda/gemm.hpp) against the host GEMM (OpenBLAS) on the
// same inputs: fp32, TF32, bf16 and fp16, every transpose combination, leading dimensions wider
// than the matrices, beta != 0, the bias and GELU epilogues, gemm_gelu and gemm_gelu_backward
// (the GELU_AUX and DGELU epilogues, and their unfused fallback), the plan cache, the k == 0
// case; and the device space's buffers and host copies.
//
// Tolerances: both sides accumulate k products in fp32 in different orders, so an element may
// differ by k ulps of sum_p |a_ip b_pj| (the bound used here, with k ulps of fp32, of TF32's
// 2^-11 input rounding, or of a bf16/fp16 output rounding where that dominates).
#include <doctest/doctest.h>

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "support/device_data.hpp"
#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/device_space.hpp"
#include "tpx/cuda/gemm.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/kernels/elementwise.hpp"
#include "tpx/kernels/gemm_host.hpp"

namespace {

using tpx::bf16;
using namespace tpx::cuda::testing;
namespace cu = tpx::cuda;

struct problem {
  bool trans_a, trans_b;
  std::int64_t m, n, k, pad;  // leading dimensions are the stored column counts plus pad
  std::int64_t lda() const { return (trans_a ? m : k) + pad; }
  std::int64_t ldb() const { return (trans_b ? k : n) + pad; }
  std::int64_t ldc() const { return n + pad; }
  std::int64_t a_rows() const { return trans_a ? k : m; }
  std::int64_t b_rows() const { return trans_b ? n : k; }
};

// |op(A)| |op(B)| element (i, j): the scale of the rounding error of C(i, j).
std::vector<double> magnitudes(const problem& p, const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> mag(p.m * p.ldc(), 0.0);
  for (std::int64_t i = 0; i < p.m; ++i)
    for (std::int64_t j = 0; j < p.n; ++j)
      for (std::int64_t q = 0; q < p.k; ++q) {
        const float x = p.trans_a ? a[q * p.lda() + i] : a[i * p.lda() + q];
        const float y = p.trans_b ? b[j * p.ldb() + q] : b[q * p.ldb() + j];
        mag[i * p.ldc() + j] += std::abs(static_cast<double>(x) * y);
      }
  return mag;
}

// Runs C = alpha op(A) op(B) + beta C on the device with element type T and compares with the
// host's fp32 GEMM of the same (T-rounded) inputs, within `unit` * (k + 2) of the magnitudes.
template <class T>
void check_gemm(cu::rank_resources& gpu, const problem& p, bool tf32, double unit) {
  CAPTURE(p.trans_a);
  CAPTURE(p.trans_b);
  CAPTURE(p.m);
  CAPTURE(p.n);
  CAPTURE(p.k);
  const auto a_t = random_values<T>(p.a_rows() * p.lda(), -1, 1, 1);
  const auto b_t = random_values<T>(p.b_rows() * p.ldb(), -1, 1, 2);
  const auto c_t = random_values<T>(p.m * p.ldc(), -1, 1, 3);
  const std::vector<float> a(a_t.begin(), a_t.end()), b(b_t.begin(), b_t.end());
  std::vector<float> want(c_t.begin(), c_t.end());
  tpx::kernels::gemm(p.trans_a, p.trans_b, p.m, p.n, p.k, 1.5f, a.data(), p.lda(), b.data(), p.ldb(), 0.5f,
                     want.data(), p.ldc());
  auto da = to_device(gpu, a_t), db = to_device(gpu, b_t), dc = to_device(gpu, c_t);
  cu::gemm(gpu.gemms(), gpu.stream(), p.trans_a, p.trans_b, p.m, p.n, p.k, 1.5f, da.data(), p.lda(), db.data(),
           p.ldb(), 0.5f, dc.data(), p.ldc(), cu::gemm_options<T>{.tf32 = tf32});
  const auto got = to_host(gpu, dc);
  const auto mag = magnitudes(p, a, b);
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < p.m; ++i)
    for (std::int64_t j = 0; j < p.ldc(); ++j) {
      const std::int64_t at = i * p.ldc() + j;
      const double g = static_cast<float>(got[at]);
      const double w = j < p.n ? want[at] : static_cast<float>(c_t[at]);  // padding untouched
      const double tolerance = j < p.n ? unit * (p.k + 2) * (1.5 * mag[at] + 1.0) : 0.0;
      if (std::abs(g - w) > tolerance && bad++ == 0) MESSAGE("C(" << i << "," << j << "): device " << g << ", host " << w);
    }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("fp32, TF32, bf16 and fp16 GEMMs match the host for every transpose and padded strides") {
  cu::rank_resources gpu(0, {});
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const problem& shape : {problem{ta, tb, 64, 48, 80, 0}, problem{ta, tb, 33, 17, 45, 3}}) {
        check_gemm<float>(gpu, shape, false, fp32_unit);
        check_gemm<float>(gpu, shape, true, 0x1.0p-11);  // TF32 rounds inputs to 10-bit mantissas
        check_gemm<bf16>(gpu, shape, false, bf16_unit);  // the output is rounded to bf16
        check_gemm<__half>(gpu, shape, false, 0x1.0p-11);
      }
}

TEST_CASE("each shape is planned once: the heuristic runs on the first call only") {
  cu::rank_resources gpu(0, {});
  const problem p{false, false, 32, 32, 32, 0};
  for (int repeat = 0; repeat < 3; ++repeat) check_gemm<float>(gpu, p, false, fp32_unit);
  CHECK(gpu.gemms().size() == 1);
  check_gemm<float>(gpu, problem{false, true, 32, 32, 32, 0}, false, fp32_unit);
  CHECK(gpu.gemms().size() == 2);
}

TEST_CASE("bias, GELU and bias+GELU epilogues equal the GEMM followed by the host functors") {
  cu::rank_resources gpu(0, {});
  const std::int64_t m = 40, n = 24, k = 32;
  const auto a = random_values<float>(m * k, -1, 1, 4), b = random_values<float>(k * n, -1, 1, 5);
  const auto bias = random_values<float>(n, -1, 1, 6);
  std::vector<float> product(m * n);
  tpx::kernels::gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, product.data(), n);
  auto da = to_device(gpu, a), db = to_device(gpu, b), dbias = to_device(gpu, bias);
  for (auto epilogue : {cu::gemm_epilogue::bias, cu::gemm_epilogue::gelu, cu::gemm_epilogue::bias_gelu}) {
    CAPTURE(static_cast<int>(epilogue));
    std::vector<float> want(m * n);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        float v = product[i * n + j];
        if (epilogue != cu::gemm_epilogue::gelu) v = tpx::kernels::add{}(v, bias[j]);
        if (epilogue != cu::gemm_epilogue::bias) v = tpx::kernels::gelu{}(v);
        want[i * n + j] = v;
      }
    cu::device_buffer<float> dc(m * n, gpu.pool(), gpu.stream());
    cu::gemm(gpu.gemms(), gpu.stream(), false, false, m, n, k, 1.0f, da.data(), k, db.data(), n, 0.0f, dc.data(), n,
             cu::gemm_options<float>{.epilogue = epilogue, .bias = dbias.data()});
    // k products in another order: k ulps of O(k) sums. cuBLASLt may evaluate GELU's tanh with
    // the hardware approximation (about 2^-11 relative), which moves gelu(x) by up to
    // |x| 2^-12: 4e-3 for the |x| < 16 of these products.
    const double floor = epilogue == cu::gemm_epilogue::bias ? 4 * k * k * fp32_unit : 4e-3;
    CHECK(mismatches(to_host(gpu, dc), want, 4.0 * k, fp32_unit, floor) == 0);
  }
}

TEST_CASE("gemm_gelu and gemm_gelu_backward equal the GEMM followed by the host functors, fused or not") {
  cu::rank_resources gpu(0, {});
  const std::int64_t m = 40, k = 32;
  // n = 24: cuBLASLt's GELU_AUX and DGELU epilogues (n a multiple of 8); n = 20: the GEMM and the
  // elementwise kernel. Both compute kernels::gelu and kernels::gelu_backward.
  for (std::int64_t n : {24, 20}) {
    CAPTURE(n);
    const auto a = random_values<float>(m * k, -1, 1, 8), b = random_values<float>(n * k, -1, 1, 9);
    const auto dy = random_values<float>(m * k, -1, 1, 10);
    std::vector<float> product(m * n), dproduct(m * n);
    tpx::kernels::gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, product.data(), n);
    tpx::kernels::gemm(false, true, m, n, k, 1.0f, dy.data(), k, b.data(), k, 0.0f, dproduct.data(), n);
    auto da = to_device(gpu, a), db = to_device(gpu, b), ddy = to_device(gpu, dy);
    cu::device_buffer<float> out(m * n, gpu.pool(), gpu.stream()), pre(m * n, gpu.pool(), gpu.stream());
    cu::gemm_gelu(gpu.gemms(), gpu.stream(), false, true, m, n, k, da.data(), k, db.data(), k, out.data(), pre.data());
    const auto got_pre = to_host(gpu, pre);
    std::vector<float> want_out(m * n), want_grad(m * n);
    for (std::int64_t i = 0; i < m * n; ++i) {
      want_out[i] = tpx::kernels::gelu{}(product[i]);
      want_grad[i] = tpx::kernels::gelu_backward{}(got_pre[i], dproduct[i]);
    }
    // As for the GELU epilogue above: k ulps of O(k) sums, and 4e-3 for a hardware tanh.
    CHECK(mismatches(got_pre, product, 4.0 * k, fp32_unit, 4 * k * k * fp32_unit) == 0);
    CHECK(mismatches(to_host(gpu, out), want_out, 4.0 * k, fp32_unit, 4e-3) == 0);
    cu::device_buffer<float> grad(m * n, gpu.pool(), gpu.stream());
    cu::gemm_gelu_backward(gpu.gemms(), gpu.stream(), false, true, m, n, k, ddy.data(), k, db.data(), k, pre.data(),
                           grad.data());
    CHECK(mismatches(to_host(gpu, grad), want_grad, 4.0 * k, fp32_unit, 4e-3) == 0);
  }
}

TEST_CASE("k == 0 scales C by beta; bad arguments throw before cuBLASLt sees them") {
  cu::rank_resources gpu(0, {});
  auto c = to_device(gpu, std::vector<float>{1, 2, 3, 4, 5, 6});
  cu::gemm<float>(gpu.gemms(), gpu.stream(), false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 2.0f, c.data(), 3);
  CHECK(to_host(gpu, c) == std::vector<float>{2, 4, 6, 8, 10, 12});
  cu::gemm<float>(gpu.gemms(), gpu.stream(), false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.0f, c.data(), 3);
  CHECK(to_host(gpu, c) == std::vector<float>(6, 0.0f));
  CHECK_THROWS_AS(cu::gemm<float>(gpu.gemms(), gpu.stream(), false, false, 2, 3, 4, 1.0f, c.data(), 2, c.data(), 3,
                                  0.0f, c.data(), 3),
                  std::invalid_argument);  // lda 2 < k 4
  CHECK_THROWS_AS(cu::gemm<float>(gpu.gemms(), gpu.stream(), false, false, 1, 1, 1, 1.0f, c.data(), 1, c.data(), 1,
                                  0.0f, c.data(), 1, {.epilogue = cu::gemm_epilogue::bias}),
                  std::invalid_argument);  // no bias
}

TEST_CASE("device buffers: zeroed, deep copies, and host round trips") {
  cu::rank_resources gpu(0, {});
  cu::device_buffer<bf16> zeros(1000, gpu.pool(), gpu.stream());
  for (bf16 x : to_host(gpu, zeros)) CHECK(static_cast<float>(x) == 0.0f);
  const auto values = random_values<bf16>(1000, -5, 5, 7);
  auto original = to_device(gpu, values);
  cu::device_buffer<bf16> copy = original;
  CHECK(copy.data() != original.data());
  original = cu::device_buffer<bf16>(10, gpu.pool(), gpu.stream());
  CHECK(mismatches(to_host(gpu, copy), values, 0, bf16_unit) == 0);
}

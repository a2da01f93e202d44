// tpx-bench-cuda gemm: tpx's device GEMM against cuBLASLt called directly (measure.hpp); and
// tpx-bench-cuda gelu: the MLP's up projection with GELU fused into cuBLASLt's epilogue against
// the GEMM followed by the elementwise kernel (measure_gelu).
//
// The tpx side is cuda::device_space::gemm on a rank_context carrying the rank's resources,
// exactly what tpx::matmul calls for a device tensor: argument checks, the dynamic lookup of the
// rank's resources, the plan-cache lookup, an NVTX range, then cublasLtMatmul. The direct side
// sets up the same cuBLASLt problem by hand once (descriptors, layouts, one heuristic query,
// the same 32 MiB workspace) and times bare cublasLtMatmul calls. Both use the row-major trick
// (C^T = B^T A^T in column-major), so they run the same algorithm on the same data and their
// outputs must agree bit for bit (max_diff 0). Rounds alternate between the two; the best
// round of each counts.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "measure.hpp"
#include "measuring.hpp"
#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device_space.hpp"
#include "tpx/cuda/gemm.hpp"
#include "tpx/cuda/kernels/random.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/cuda/stream.hpp"
#include "tpx/kernels/elementwise.hpp"
#include "tpx/spmd/rank_context.hpp"

namespace tpx::bench::cuda {

namespace {

namespace cu = tpx::cuda;

// cuBLASLt set up by hand for row-major C[n,n] = A[n,n] B[n,n].
class direct_gemm {
 public:
  direct_gemm(cudaDataType_t type, cublasComputeType_t compute, std::int64_t n, std::size_t workspace_bytes)
      : workspace_bytes_(workspace_bytes) {
    TPX_CUBLAS_CHECK(cublasLtCreate(&handle_));
    TPX_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F));
    for (auto* layout : {&a_, &b_, &c_}) TPX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(layout, type, n, n, n));
    cublasLtMatmulPreference_t preference = nullptr;
    TPX_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const std::uint64_t bytes = workspace_bytes;
    TPX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                                          sizeof bytes));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    TPX_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, desc_, a_, b_, c_, c_, preference, 1, &result, &found));
    cublasLtMatmulPreferenceDestroy(preference);
    if (found == 0) throw std::runtime_error("cuBLASLt found no algorithm");
    algo_ = result.algo;
    TPX_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes));
  }
  direct_gemm(const direct_gemm&) = delete;
  direct_gemm& operator=(const direct_gemm&) = delete;
  ~direct_gemm() {
    cudaFree(workspace_);
    for (auto* layout : {c_, b_, a_}) cublasLtMatrixLayoutDestroy(layout);
    cublasLtMatmulDescDestroy(desc_);
    cublasLtDestroy(handle_);
  }

  // Row-major C = A B is column-major C^T = B^T A^T: cuBLASLt's A is B.
  void run(const void* a, const void* b, void* c, cudaStream_t stream) const {
    const float alpha = 1.0f, beta = 0.0f;
    TPX_CUBLAS_CHECK(cublasLtMatmul(handle_, desc_, &alpha, b, a_, a, b_, &beta, c, c_, c, c_, &algo_, workspace_,
                                    workspace_bytes_, stream));
  }

 private:
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_;
};

template <class T>
gemm_row measure_one(const std::string& type, std::int64_t n, int iters, int warmup) {
  cu::rank_resources resources(0, cu::rank_options{.tf32 = type == "tf32"});
  rank_context ctx(0, 1, {}, {});
  ctx.set_backend(&resources);
  const std::size_t elements = static_cast<std::size_t>(n * n);
  auto a = cu::device_space::make_buffer<T>(ctx, elements), b = cu::device_space::make_buffer<T>(ctx, elements);
  auto c_tpx = cu::device_space::make_buffer<T>(ctx, elements), c_direct = cu::device_space::make_buffer<T>(ctx, elements);
  const std::array<std::int64_t, 1> shape{static_cast<std::int64_t>(elements)}, origin{0};
  cu::fill_normal(resources.stream(), a.data(), shape, origin, shape, 1, 1.0f);
  cu::fill_normal(resources.stream(), b.data(), shape, origin, shape, 2, 1.0f);

  const auto through_tpx = [&] {
    cu::device_space::gemm<T>(ctx, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c_tpx.data(), n);
  };
  const cublasComputeType_t compute = type == "tf32" ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const direct_gemm direct(cu::blas_type<T>, compute, n, resources.options().gemm_workspace_bytes);
  const auto directly = [&] { direct.run(a.data(), b.data(), c_direct.data(), resources.stream()); };

  for (int i = 0; i < warmup; ++i) {
    through_tpx();
    directly();
  }
  double best_tpx = 1e30, best_direct = 1e30;
  for (int round = 0; round < 3; ++round) {
    best_tpx = std::min(best_tpx, time_calls(resources.stream(), iters, through_tpx));
    best_direct = std::min(best_direct, time_calls(resources.stream(), iters, directly));
  }
  std::vector<T> x(elements), y(elements);
  cu::device_space::to_host(ctx, c_tpx.data(), elements, x.data());
  cu::device_space::to_host(ctx, c_direct.data(), elements, y.data());
  double diff = 0;
  for (std::size_t i = 0; i < elements; ++i)
    diff = std::max(diff, std::abs(static_cast<double>(static_cast<float>(x[i])) - static_cast<float>(y[i])));
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  return {type, n, flops / best_tpx / 1e12, flops / best_direct / 1e12, best_direct / best_tpx, diff};
}

template <class T>
gelu_row measure_gelu_one(const std::string& type, std::int64_t m, std::int64_t n, std::int64_t k, int iters,
                          int warmup) {
  cu::rank_resources resources(0, cu::rank_options{.tf32 = type == "fp32"});
  rank_context ctx(0, 1, {}, {});
  ctx.set_backend(&resources);
  using space = cu::device_space;
  const auto random = [&](std::int64_t count, std::uint64_t seed) {
    auto buffer = space::make_buffer_for_overwrite<T>(ctx, static_cast<std::size_t>(count));
    const std::array<std::int64_t, 1> shape{count}, origin{0};
    cu::fill_normal(resources.stream(), buffer.data(), shape, origin, shape, seed, 1.0f / std::sqrt(float(k)));
    return buffer;
  };
  const auto a = random(m * k, 1), b = random(k * n, 2), g = random(m * k, 3), c = random(n * k, 4);
  const auto output = [&] { return space::make_buffer_for_overwrite<T>(ctx, static_cast<std::size_t>(m * n)); };
  auto pre = output(), out = output(), grad = output();
  auto pre_unfused = output(), out_unfused = output(), grad_unfused = output();

  const auto forward_fused = [&] { space::gemm_gelu(ctx, false, false, m, n, k, a.data(), k, b.data(), n, out.data(), pre.data()); };
  const auto forward_unfused = [&] {
    space::gemm(ctx, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, pre_unfused.data(), n);
    space::transform(ctx, static_cast<std::size_t>(m * n), kernels::gelu{}, out_unfused.data(),
                     static_cast<const T*>(pre_unfused.data()));
  };
  const auto backward_fused = [&] {
    space::gemm_gelu_backward(ctx, false, true, m, n, k, g.data(), k, c.data(), k, static_cast<const T*>(pre.data()),
                              grad.data());
  };
  const auto backward_unfused = [&] {
    space::gemm(ctx, false, true, m, n, k, 1.0f, g.data(), k, c.data(), k, 0.0f, grad_unfused.data(), n);
    space::transform(ctx, static_cast<std::size_t>(m * n), kernels::gelu_backward{}, grad_unfused.data(),
                     static_cast<const T*>(pre_unfused.data()), static_cast<const T*>(grad_unfused.data()));
  };
  for (int i = 0; i < warmup; ++i) {
    forward_fused();
    forward_unfused();
    backward_fused();
    backward_unfused();
  }
  // Rounds alternate between the four; the best round of each counts.
  gelu_row row{type, m, n, k, 1e30, 1e30, 1e30, 1e30, 0};
  const cudaStream_t stream = resources.stream();
  for (int round = 0; round < 3; ++round) {
    row.forward_fused_ms = std::min(row.forward_fused_ms, 1e3 * time_calls(stream, iters, forward_fused));
    row.forward_unfused_ms = std::min(row.forward_unfused_ms, 1e3 * time_calls(stream, iters, forward_unfused));
    row.backward_fused_ms = std::min(row.backward_fused_ms, 1e3 * time_calls(stream, iters, backward_fused));
    row.backward_unfused_ms = std::min(row.backward_unfused_ms, 1e3 * time_calls(stream, iters, backward_unfused));
  }
  const auto on_host = [&](const T* device) {
    std::vector<T> host(static_cast<std::size_t>(m * n));
    space::to_host(ctx, device, host.size(), host.data());
    return host;
  };
  row.max_rel_diff = std::max(relative_difference(on_host(out.data()), on_host(out_unfused.data())),
                              relative_difference(on_host(grad.data()), on_host(grad_unfused.data())));
  return row;
}

}  // namespace

std::vector<gelu_row> measure_gelu(const std::vector<std::string>& shapes, const std::vector<std::string>& types,
                                   int iters, int warmup) {
  std::vector<gelu_row> rows;
  for (const std::string& type : types)
    for (const std::string& shape : shapes) {
      long long m = 0, n = 0, k = 0;
      char end = 0;
      if (std::sscanf(shape.c_str(), "%lldx%lldx%lld%c", &m, &n, &k, &end) != 3 || m < 1 || n < 1 || k < 1)
        throw std::invalid_argument("GELU shape \"" + shape + "\" is not MxNxK with positive M, N, K (e.g. 16384x3072x768)");
      if (type == "fp32")
        rows.push_back(measure_gelu_one<float>(type, m, n, k, iters, warmup));
      else if (type == "bf16")
        rows.push_back(measure_gelu_one<bf16>(type, m, n, k, iters, warmup));
      else
        throw std::invalid_argument("unknown GELU type " + type + " (fp32, bf16)");
    }
  return rows;
}

std::vector<gemm_row> measure_gemm(const std::vector<std::int64_t>& sizes, const std::vector<std::string>& types,
                                   int iters, int warmup) {
  std::vector<gemm_row> rows;
  for (const std::string& type : types)
    for (std::int64_t n : sizes) {
      if (type == "fp32" || type == "tf32")
        rows.push_back(measure_one<float>(type, n, iters, warmup));
      else if (type == "bf16")
        rows.push_back(measure_one<bf16>(type, n, iters, warmup));
      else if (type == "fp16")
        rows.push_back(measure_one<__half>(type, n, iters, warmup));
      else
        throw std::invalid_argument("unknown GEMM type " + type + " (fp32, tf32, bf16, fp16)");
    }
  return rows;
}

}  // namespace tpx::bench::cuda

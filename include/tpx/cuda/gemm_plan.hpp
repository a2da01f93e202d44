// gemm_plan: one cuBLASLt matrix product described once (operation, layouts, the algorithm the
// heuristic chose) and reused for every later GEMM of the same shape; gemm_plans: the per-rank
// cache of them, with the cuBLASLt handle and the one workspace every GEMM of the rank uses.
//
// tpx's tensors are row-major and cuBLASLt's default is column-major, so a plan describes the
// transposed product: row-major C[m,n] = op(A)[m,k] op(B)[k,n] is column-major
// C^T[n,m] = op(B)^T[n,k] op(A)^T[k,m], i.e. cuBLASLt's A is our B and its B is our A, with
// M = n, N = m and the same leading dimensions. A transposed operand stays a flag
// (CUBLASLT_MATMUL_DESC_TRANSA/B), never a copy; which flag follows from the named-dim layout in
// ops/matmul.hpp. A bias epilogue then adds bias[j] to column j of the row-major C (one value per
// output feature), as a linear layer needs. A batched plan (gemm_batched in gemm.hpp, for
// ops/einsum.hpp) gives the three layouts cuBLASLt's strided-batch attributes (BATCH_COUNT,
// STRIDED_BATCH_OFFSET): one cublasLtMatmul runs every product of the batch.
//
// The heuristic depends on everything in gemm_key, including how well the pointers are aligned,
// so that is part of the key; asking it once per shape is what makes the per-call overhead of
// tpx's GEMM the cost of a hash lookup. A cache belongs to one rank and is used from that rank's
// thread only.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device_buffer.hpp"

namespace tpx::cuda {

// What the GEMM does to the product before storing it (cuBLASLt epilogues). gelu is the tanh
// approximation, kernels::gelu. gelu_aux also stores the product itself (GELU's input, which the
// backward pass needs) in the auxiliary matrix; dgelu multiplies the product by GELU's slope at
// the auxiliary matrix (kernels::gelu_backward). The auxiliary matrix has C's element type and
// leading dimension.
enum class gemm_epilogue : std::uint8_t { none, bias, gelu, bias_gelu, gelu_aux, dgelu };

inline bool has_bias(gemm_epilogue e) { return e == gemm_epilogue::bias || e == gemm_epilogue::bias_gelu; }
inline bool has_aux(gemm_epilogue e) { return e == gemm_epilogue::gelu_aux || e == gemm_epilogue::dgelu; }

// cuBLASLt has no algorithm for a product (its type, shape, alignment and epilogue together).
class no_gemm_algorithm : public cuda_error {
 public:
  using cuda_error::cuda_error;
};

// Everything a plan depends on.
struct gemm_key {
  cudaDataType_t type = CUDA_R_32F;  // of A, B, C and the bias
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  gemm_epilogue epilogue = gemm_epilogue::none;
  std::uint32_t align_a = 16, align_b = 16, align_c = 16;  // bytes: 1, 2, 4, 8 or 16
  // Strided batches (gemm_batched): `batch` products, the i-th operands at i * stride (elements).
  std::int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;

  friend bool operator==(const gemm_key&, const gemm_key&) = default;
};

struct gemm_key_hash {
  std::size_t operator()(const gemm_key& key) const {
    std::size_t h = 0;
    const auto mix = [&h](std::uint64_t v) { h ^= std::hash<std::uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    for (std::int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc}) mix(static_cast<std::uint64_t>(v));
    mix(static_cast<std::uint64_t>(key.type) | static_cast<std::uint64_t>(key.compute) << 16 |
        static_cast<std::uint64_t>(key.epilogue) << 32 | static_cast<std::uint64_t>(key.trans_a) << 40 |
        static_cast<std::uint64_t>(key.trans_b) << 41);
    mix(key.align_a | key.align_b << 8 | key.align_c << 16);
    for (std::int64_t v : {key.batch, key.stride_a, key.stride_b, key.stride_c}) mix(static_cast<std::uint64_t>(v));
    return h;
  }
};

// The largest power of two (at most 16) dividing a byte count (0 counts as aligned).
inline std::uint32_t alignment_of_bytes(std::uint64_t bytes) {
  std::uint32_t align = 16;
  while (align > 1 && bytes % align != 0) align /= 2;
  return align;
}

// The largest power of two (at most 16) dividing the address: what cuBLASLt may assume.
inline std::uint32_t alignment_of(const void* p) {
  return alignment_of_bytes(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)));
}

class gemm_plan {
 public:
  gemm_plan(cublasLtHandle_t handle, const gemm_key& key, std::size_t workspace_bytes)
      : name_("gemm " + describe(key)) {
    try {
      describe_operation(key);
      choose_algorithm(handle, key, workspace_bytes);
    } catch (...) {
      release();
      throw;
    }
  }
  gemm_plan(const gemm_plan&) = delete;
  gemm_plan& operator=(const gemm_plan&) = delete;
  ~gemm_plan() { release(); }

  cublasLtMatmulDesc_t desc() const { return desc_; }
  cublasLtMatrixLayout_t a() const { return a_; }
  cublasLtMatrixLayout_t b() const { return b_; }
  cublasLtMatrixLayout_t c() const { return c_; }
  const cublasLtMatmulAlgo_t& algo() const { return algo_; }
  // "gemm bf16 4096x4096x1024 NT": the NVTX range of every call of the plan.
  const std::string& name() const { return name_; }

  // "bf16 4096x4096x1024 NT bias_gelu": for errors and NVTX ranges.
  static std::string describe(const gemm_key& key) {
    const char* type = key.type == CUDA_R_32F ? (key.compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? "tf32" : "fp32")
                       : key.type == CUDA_R_16BF ? "bf16"
                                                 : "fp16";
    const char* epilogues[] = {"", " bias", " gelu", " bias_gelu", " gelu_aux", " dgelu"};
    return std::string(type) + " " + std::to_string(key.m) + "x" + std::to_string(key.n) + "x" +
           std::to_string(key.k) + " " + (key.trans_a ? "T" : "N") + (key.trans_b ? "T" : "N") +
           epilogues[static_cast<int>(key.epilogue)] +
           (key.batch != 1 ? " batch " + std::to_string(key.batch) : std::string());
  }

 private:
  void describe_operation(const gemm_key& key) {
    TPX_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, key.compute, CUDA_R_32F));
    // cuBLASLt's A is our B, its B our A (see the top of the file).
    set(CUBLASLT_MATMUL_DESC_TRANSA, key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    set(CUBLASLT_MATMUL_DESC_TRANSB, key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue_of(key.epilogue));
    if (has_bias(key.epilogue)) set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, key.type);
    if (has_aux(key.epilogue)) set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, key.ldc);
    TPX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, key.type, key.trans_b ? key.k : key.n,
                                                key.trans_b ? key.n : key.k, key.ldb));
    TPX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, key.type, key.trans_a ? key.m : key.k,
                                                key.trans_a ? key.k : key.m, key.lda));
    TPX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c_, key.type, key.n, key.m, key.ldc));
    if (key.batch != 1) {  // strided batches; again cuBLASLt's A is our B
      const std::int32_t count = static_cast<std::int32_t>(key.batch);
      for (auto [layout, stride] : {std::pair{a_, key.stride_b}, std::pair{b_, key.stride_a}, std::pair{c_, key.stride_c}}) {
        TPX_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        TPX_CUBLAS_CHECK(
            cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
      }
    }
  }

  void choose_algorithm(cublasLtHandle_t handle, const gemm_key& key, std::size_t workspace_bytes) {
    cublasLtMatmulPreference_t raw = nullptr;
    TPX_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw));
    const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, decltype(&cublasLtMatmulPreferenceDestroy)> preference(
        raw, &cublasLtMatmulPreferenceDestroy);
    const auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value) {
      TPX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(raw, attribute, &value, sizeof value));
    };
    prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<std::uint64_t>(workspace_bytes));
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, desc_, a_, b_, c_, c_, raw, 1, &result, &found);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0)
      throw no_gemm_algorithm("tpx: cuBLASLt has no algorithm for gemm " + describe(key) + " (" +
                       cublasLtGetStatusString(status) + ")");
    algo_ = result.algo;
  }

  template <class V>
  void set(cublasLtMatmulDescAttributes_t attribute, const V& value) {
    TPX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof value));
  }
  static cublasLtEpilogue_t epilogue_of(gemm_epilogue e) {
    switch (e) {
      case gemm_epilogue::bias:
        return CUBLASLT_EPILOGUE_BIAS;
      case gemm_epilogue::gelu:
        return CUBLASLT_EPILOGUE_GELU;
      case gemm_epilogue::bias_gelu:
        return CUBLASLT_EPILOGUE_GELU_BIAS;
      case gemm_epilogue::gelu_aux:
        return CUBLASLT_EPILOGUE_GELU_AUX;
      case gemm_epilogue::dgelu:
        return CUBLASLT_EPILOGUE_DGELU;
      case gemm_epilogue::none:
        break;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
  }
  void release() {
    if (c_ != nullptr) cublasLtMatrixLayoutDestroy(c_);
    if (b_ != nullptr) cublasLtMatrixLayoutDestroy(b_);
    if (a_ != nullptr) cublasLtMatrixLayoutDestroy(a_);
    if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
    c_ = b_ = a_ = nullptr;
    desc_ = nullptr;
  }

  std::string name_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

class gemm_plans {
 public:
  // A handle, a workspace of workspace_bytes from `pool` (ordered on `stream`), no plans yet.
  gemm_plans(std::size_t workspace_bytes, cudaMemPool_t pool, cudaStream_t stream)
      : workspace_(workspace_bytes, pool, stream) {
    TPX_CUBLAS_CHECK(cublasLtCreate(&handle_));
  }
  gemm_plans(const gemm_plans&) = delete;
  gemm_plans& operator=(const gemm_plans&) = delete;
  ~gemm_plans() {
    plans_.clear();
    cublasLtDestroy(handle_);
  }

  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() { return workspace_.data(); }
  std::size_t workspace_bytes() const { return workspace_.size(); }
  std::size_t size() const { return plans_.size(); }

  // The plan of key, made (and the heuristic asked) on first use.
  const gemm_plan& plan(const gemm_key& key) {
    auto found = plans_.find(key);
    if (found == plans_.end())
      found = plans_.emplace(key, std::make_unique<gemm_plan>(handle_, key, workspace_bytes())).first;
    return *found->second;
  }
  // The same, or null when cuBLASLt has no algorithm for key (asked once): for the fused
  // epilogues, whose callers have an unfused way.
  const gemm_plan* plan_if_any(const gemm_key& key) {
    if (unplannable_.contains(key)) return nullptr;
    try {
      return &plan(key);
    } catch (const no_gemm_algorithm&) {
      unplannable_.insert(key);
      return nullptr;
    }
  }

 private:
  cublasLtHandle_t handle_ = nullptr;
  device_buffer<std::byte> workspace_;
  std::unordered_map<gemm_key, std::unique_ptr<gemm_plan>, gemm_key_hash> plans_;
  std::unordered_set<gemm_key, gemm_key_hash> unplannable_;
};

}  // namespace tpx::cuda

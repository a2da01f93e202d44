// Error checks for the CUDA runtime and cuBLASLt: every call whose status matters goes through
// TPX_CUDA_CHECK or TPX_CUBLAS_CHECK, which throw tpx::cuda::cuda_error naming the call, the
// error and the file and line, as llm.c's cudaCheck does (but as an exception, so that the
// SPMD launcher can report which rank failed and stop the others instead of exiting).
//
// Kernel launches are checked with TPX_CUDA_CHECK(cudaGetLastError()) right after the launch:
// that catches bad launch configurations at once; faults inside a kernel surface at the next
// synchronizing call. NCCL has its own check (nccl_check.hpp), which also knows the communicator.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace tpx::cuda {

class cuda_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] inline void fail(const char* call, const std::string& what, const char* file, int line) {
  throw cuda_error("tpx: " + std::string(call) + " failed: " + what + " (" + file + ":" + std::to_string(line) + ")");
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    fail(call, std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status), file, line);
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) fail(call, cublasLtGetStatusString(status), file, line);
}
}  // namespace detail

}  // namespace tpx::cuda

#define TPX_CUDA_CHECK(call) ::tpx::cuda::detail::check_cuda((call), #call, __FILE__, __LINE__)
#define TPX_CUBLAS_CHECK(call) ::tpx::cuda::detail::check_cublas((call), #call, __FILE__, __LINE__)

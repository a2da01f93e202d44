// Which CUDA devices this process can use, asked without failing: a machine with no GPU, or no
// driver, has zero devices, and says why.
//
// The CUDA tests and benches call this first and report themselves skipped ("skipped: no CUDA
// device") rather than passed when it returns 0; the launchers call it to refuse a mesh that
// needs more GPUs than there are, and gpu_claim to refuse two ranks on one GPU
// (launch/exclusive_claims.hpp).
#pragma once

#include <cuda_runtime.h>

#include <span>
#include <string>

#include "tpx/cuda/check.hpp"
#include "tpx/launch/exclusive_claims.hpp"
#include "tpx/launch/this_host.hpp"

namespace tpx::cuda {

struct device_census {
  int count = 0;       // usable devices
  std::string reason;  // why count is 0 (the runtime's words), or empty
};

inline device_census find_devices() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // reset the last error, so later runtime calls start clean
    return {0, std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status)};
  }
  if (count == 0) return {0, "the CUDA runtime reports no devices"};
  return {count, ""};
}

inline int device_count() { return find_devices().count; }

// What a launched rank that drives `device` holds alone: the GPU by its UUID (the same on every
// process, however CUDA_VISIBLE_DEVICES numbers it), and how the rank came to it,
// "device 0 (CUDA_VISIBLE_DEVICES=3), local rank 1 on node7". `visible` is
// CUDA_VISIBLE_DEVICES's value, nullptr when unset.
inline exclusive_claim gpu_claim(int device, const char* visible, int local_rank) {
  cudaDeviceProp properties{};
  TPX_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  const auto* bytes = reinterpret_cast<const unsigned char*>(properties.uuid.bytes);
  std::string holder = "device " + std::to_string(device);
  if (visible != nullptr) {
    holder += " (CUDA_VISIBLE_DEVICES=";
    holder += visible;
    holder += ')';
  }
  holder += ", local rank " + std::to_string(local_rank) + " on " + tpx::this_host();
  return {"GPU " + gpu_uuid_text(std::span<const unsigned char, 16>(bytes, 16)), holder};
}

}  // namespace tpx::cuda

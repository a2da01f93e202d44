// Which CUDA devices this process can use, asked without failing: a machine with no GPU, or no
// driver, has zero devices, and says why.
//
// The CUDA tests and benches call this first and report themselves skipped ("skipped: no CUDA
// device") rather than passed when it returns 0; the launchers call it to refuse a mesh that
// needs more GPUs than there are.
#pragma once

#include <cuda_runtime.h>

#include <string>

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

}  // namespace tpx::cuda

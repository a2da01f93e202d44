// NVTX ranges in the "tpx" domain, so that Nsight Systems shows every collective and GEMM of
// every rank by name on that rank's timeline ("all_gather<float> 4096 elements", "gemm bf16
// 4096x4096x4096").
//
// nvtx3 is header-only and ships with the CUDA toolkit; without a profiler attached a range
// costs one branch. tpx::cuda::nvtx_range is a scope guard: the range lasts as long as it does.
#pragma once

#include <nvtx3/nvtx3.hpp>

#include <string>

namespace tpx::cuda {

struct nvtx_domain {
  static constexpr const char* name{"tpx"};
};

class nvtx_range {
 public:
  explicit nvtx_range(const std::string& what) : range_(what) {}

 private:
  nvtx3::scoped_range_in<nvtx_domain> range_;
};

}  // namespace tpx::cuda

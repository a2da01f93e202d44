// host_staging: how a rank copies small host arrays to its GPU without waiting: through a
// pinned (page-locked) buffer that the copy engine reads while the host goes on.
//
// A copy from ordinary (pageable) host memory cannot be asynchronous: the driver must finish
// reading it before the call returns. A training step uploads its batch of tokens every step,
// so that wait would stall the host once per step. upload() instead copies the bytes into the
// pinned buffer, queues the device copy on the rank's stream and returns; the buffer is reused
// by the next upload once an event says the previous copy has left it, which by then it has
// (a step later). Uploads larger than `max_staged_bytes` (initial weights, checkpoints) go
// directly and wait, rather than growing the pinned buffer to the size of the largest tensor.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/stream.hpp"

namespace tpx::cuda {

class host_staging {
 public:
  static constexpr std::size_t max_staged_bytes = std::size_t{16} << 20;

  host_staging() = default;
  host_staging(const host_staging&) = delete;
  host_staging& operator=(const host_staging&) = delete;
  ~host_staging() {
    if (pinned_ != nullptr) {
      cudaEventSynchronize(left_.get());
      cudaFreeHost(pinned_);
    }
  }

  // dst (device memory) = bytes of src (host memory), queued on `stream`; src may be reused on
  // return.
  void upload(cudaStream_t stream, void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    if (bytes > max_staged_bytes) {
      TPX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
      TPX_CUDA_CHECK(cudaStreamSynchronize(stream));
      return;
    }
    left_.synchronize();  // the previous upload has left the buffer (long since, in a step)
    if (bytes > capacity_) {
      if (pinned_ != nullptr) TPX_CUDA_CHECK(cudaFreeHost(pinned_));
      pinned_ = nullptr;
      TPX_CUDA_CHECK(cudaMallocHost(&pinned_, bytes));
      capacity_ = bytes;
    }
    std::memcpy(pinned_, src, bytes);
    TPX_CUDA_CHECK(cudaMemcpyAsync(dst, pinned_, bytes, cudaMemcpyHostToDevice, stream));
    left_.record(stream);
  }

 private:
  void* pinned_ = nullptr;
  std::size_t capacity_ = 0;
  event left_;
};

}  // namespace tpx::cuda

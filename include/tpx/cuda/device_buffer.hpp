// device_buffer<T>: n elements of device memory owned like a std::vector, allocated and freed in
// stream order (cudaMallocFromPoolAsync / cudaFreeAsync) on the stream of the rank that made it.
//
// This is the buffer of tpx's device space (device_space.hpp): a device tensor's elements, and
// the pack/unpack buffers of the collectives. Allocation comes from the rank's memory pool,
// which keeps freed memory for reuse (rank_resources.hpp), so a training step's temporaries cost
// no cudaMalloc after the first step. Memory starts zeroed (as host tensors do), except from
// for_overwrite(), for outputs a kernel then writes whole (no memset queued). A copy is a new
// allocation filled by a device-to-device copy on the same stream; a move steals the pointer.
// begin()/end() are device pointers, which makes a buffer convertible to std::span<T>: the
// spans a communicator receives for a device tensor point to device memory.
//
// Freeing is stream-ordered too: the memory returns to the pool once the work already queued on
// the stream (which may still read it) has finished, with no host synchronization. A tensor's
// buffer follows its rank's current stream (stream_ref): allocated on the background lane by a
// task (rank_resources.hpp), it is freed on the rank's own stream once the rank has joined the
// task, after the rank's kernels that read it; freed by a task, after the task's collectives. A buffer
// made with a memory_meter (device_space gives the rank's: tensor/memory_meter.hpp) counts its
// bytes there from allocation to free; its copies count on the same meter. While the thread
// records a step (rank_resources::record), each allocation and free is entered in the
// recording's ledger (spmd/recording_ledger.hpp), which checks that the step frees exactly what
// it makes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/stream.hpp"
#include "tpx/spmd/recording_ledger.hpp"
#include "tpx/tensor/memory_meter.hpp"

namespace tpx::cuda {

template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  // n zero elements from `pool`, ordered on `stream`, counted on `meter` if given.
  device_buffer(std::size_t n, cudaMemPool_t pool, stream_ref stream, memory_meter* meter = nullptr)
      : device_buffer(n, pool, stream, meter, true) {}
  // n elements of unspecified value, to be overwritten.
  static device_buffer for_overwrite(std::size_t n, cudaMemPool_t pool, stream_ref stream,
                                     memory_meter* meter = nullptr) {
    return device_buffer(n, pool, stream, meter, false);
  }
  device_buffer(const device_buffer& other)
      : size_(other.size_), pool_(other.pool_), stream_(other.stream_), meter_(other.meter_) {
    if (size_ == 0) return;
    void* p = nullptr;
    TPX_CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes(), pool_, stream_.get()));
    made(p);
    TPX_CUDA_CHECK(cudaMemcpyAsync(data_, other.data_, bytes(), cudaMemcpyDeviceToDevice, stream_.get()));
  }
  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        pool_(other.pool_),
        stream_(other.stream_),
        meter_(other.meter_) {}
  device_buffer& operator=(device_buffer other) noexcept {
    swap(*this, other);
    return *this;
  }
  ~device_buffer() {
    if (data_ == nullptr) return;
    // A destructor cannot report failure, so its error is taken here rather than left for the next
    // kernel launch's check to report as its own (a buffer of a graph that was refused, say).
    if (cudaFreeAsync(data_, stream_.get()) != cudaSuccess) (void)cudaGetLastError();
    if (meter_ != nullptr) meter_->remove(static_cast<std::int64_t>(bytes()));
    if (recording_ledger* ledger = recording_ledger::current()) ledger->freed(data_, bytes());
  }

  friend void swap(device_buffer& a, device_buffer& b) noexcept {
    std::swap(a.data_, b.data_);
    std::swap(a.size_, b.size_);
    std::swap(a.pool_, b.pool_);
    std::swap(a.stream_, b.stream_);
    std::swap(a.meter_, b.meter_);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  cudaStream_t stream() const { return stream_.get(); }

 private:
  device_buffer(std::size_t n, cudaMemPool_t pool, stream_ref stream, memory_meter* meter, bool zeroed)
      : size_(n), pool_(pool), stream_(stream), meter_(meter) {
    if (n == 0) return;
    void* p = nullptr;
    TPX_CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes(), pool_, stream_.get()));
    made(p);
    if (zeroed) TPX_CUDA_CHECK(cudaMemsetAsync(data_, 0, bytes(), stream_.get()));
  }

  // Takes the allocation at p: counted on the meter, entered in the ledger of a recording.
  void made(void* p) {
    data_ = static_cast<T*>(p);
    if (meter_ != nullptr) meter_->add(static_cast<std::int64_t>(bytes()));
    if (recording_ledger* ledger = recording_ledger::current()) ledger->made(data_, bytes());
  }

  std::size_t bytes() const { return size_ * sizeof(T); }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  cudaMemPool_t pool_ = nullptr;
  stream_ref stream_ = cudaStream_t{};
  memory_meter* meter_ = nullptr;
};

}  // namespace tpx::cuda

// page_vector<T>: a std::vector whose elements start on a 4 KiB page boundary, for the
// buffers that benches copy between.
//
// Device allocators hand out page-aligned memory, and so do nccl-tests' buffers. Plain heap
// vectors start 16 bytes past an arbitrary address, and on some machines that matters a lot:
// on the AMD EPYC (Zen 3) VM these benches were first run on, glibc's memcpy of 4-64 KiB runs at
// about 1.3 GB/s instead of 20-80 GB/s when the destination lies 16 bytes past the source modulo
// 4 KiB, which two vectors allocated one after the other readily do (bench/README.md). Aligning
// every bench buffer to a page keeps such accidents out of the measurements.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace tpx::bench {

template <class T>
struct page_allocator {
  using value_type = T;
  static constexpr std::align_val_t page{4096};

  page_allocator() = default;
  template <class U>
  page_allocator(const page_allocator<U>&) noexcept {}  // NOLINT: rebinding, as allocators do

  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), page)); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, page); }
  friend bool operator==(const page_allocator&, const page_allocator&) { return true; }
};

template <class T>
using page_vector = std::vector<T, page_allocator<T>>;

}  // namespace tpx::bench

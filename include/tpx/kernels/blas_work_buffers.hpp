// A clear error instead of a silent hang when OpenBLAS's work buffers do not fit in memory.
//
// OpenBLAS gives every thread inside a BLAS call at the same moment (the callers, and its own
// workers when a call may use several threads) a work buffer of its own: BUFFER_SIZE, 128 MiB in
// Debian's build, plus a page. A buffer is allocated the first time that many threads are in BLAS
// at once and kept for the life of the process. When the allocation fails, blas_memory_alloc
// (OpenBLAS's driver/others/memory.c) tries again forever: a rank that runs out of address space
// (ulimit -v) inside sgemm spins at full CPU and the run hangs without a
// word. The host backend is exposed to it by design, as every rank of a mesh is a thread that
// calls BLAS: 16 ranks need 2 GiB of buffers.
//
// blas_entry is held around every call into BLAS (kernels/gemm_host.hpp). It counts the threads
// inside, and when the buffers they need rise above the most ever needed, it first maps and
// unmaps a region of one buffer's size and a margin; if the kernel refuses, the call throws
// blas_buffer_error (a std::bad_alloc, so spmd reports the rank as out of memory) instead of
// entering OpenBLAS. A thread that raises the most ever needed holds one lock from its check to
// the end of its BLAS call, in which OpenBLAS allocates the new buffer: two threads can no
// longer both find room for one buffer and both take it (one of them then spun forever, about
// one run in twelve of tpx-train --mesh 3x3 under ulimit -v 700000). The margin covers what
// other ranks allocate meanwhile (a tensor, not 128 MiB). Other builds of OpenBLAS use other
// sizes (32 to 256 MiB); a smaller one is only checked generously.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>
#include <string>

#include "tpx/kernels/blas_threads.hpp"

namespace tpx::kernels {

// One OpenBLAS work buffer as Debian builds it: BUFFER_SIZE (32 << 22 bytes) and a page.
inline constexpr std::size_t openblas_buffer_bytes = (std::size_t{32} << 22) + 4096;

class blas_buffer_error : public std::bad_alloc {
 public:
  explicit blas_buffer_error(int buffers)
      : message_("cannot allocate OpenBLAS's work buffer number " + std::to_string(buffers) +
                 " (128 MiB each, one per thread inside BLAS at the same moment) for a GEMM: "
                 "fewer ranks per process, or more memory, would let it run") {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

namespace blas_detail {
inline std::atomic<int>& threads_inside() {
  static std::atomic<int> count{0};
  return count;
}
inline std::atomic<int>& most_buffers() {
  static std::atomic<int> count{0};
  return count;
}
// Held from the check of a new buffer to the end of the BLAS call that allocates it.
inline std::mutex& rising() {
  static std::mutex m;
  return m;
}
// Whether the kernel would give this process one more buffer's worth of address space now, and
// a margin for what other threads allocate before OpenBLAS takes it.
inline bool buffer_fits() {
  constexpr std::size_t bytes = openblas_buffer_bytes + (std::size_t{16} << 20);
  void* region =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region == MAP_FAILED) return false;
  ::munmap(region, bytes);
  return true;
}
}  // namespace blas_detail

// Held by a thread for the length of one BLAS call (see the top of the file).
class blas_entry {
 public:
  blas_entry() {
    const int inside = ++blas_detail::threads_inside();
    const int needed = inside + blas_threads() - 1;  // the callers, and OpenBLAS's own workers
    if (needed <= blas_detail::most_buffers().load()) return;
    std::unique_lock rise(blas_detail::rising());
    if (needed <= blas_detail::most_buffers().load()) return;  // raised while this one waited
    if (!blas_detail::buffer_fits()) {
      --blas_detail::threads_inside();
      throw blas_buffer_error(needed);
    }
    blas_detail::most_buffers().store(needed);
    rise_ = std::move(rise);  // until OpenBLAS has allocated the buffer, in this call
  }
  ~blas_entry() { --blas_detail::threads_inside(); }
  blas_entry(const blas_entry&) = delete;
  blas_entry& operator=(const blas_entry&) = delete;

 private:
  std::unique_lock<std::mutex> rise_;  // held by a call that raised the most buffers needed
};

}  // namespace tpx::kernels

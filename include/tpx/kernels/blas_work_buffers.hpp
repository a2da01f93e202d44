// A clear error, or a short wait, instead of a silent hang when OpenBLAS's work buffers do not fit
// in memory.
//
// OpenBLAS (driver/others/memory.c and blas_server.c) keeps a table of work buffers of
// BUFFER_SIZE, 128 MiB in Debian's build, plus a page. Every call of a level-3 routine takes one
// for its caller for the length of the call; every thread of OpenBLAS's own pool takes one when
// it starts and keeps it (a call that uses several threads hands its other parts to the pool). A
// buffer is allocated when every one in the table is taken, and kept for the life of the process.
// When the allocation fails, blas_memory_alloc tries again forever: a rank that runs out of
// address space (ulimit -v) inside sgemm spins at full CPU and the run hangs without a word. The
// host backend is exposed to it by design, as every rank of a mesh is a thread that calls BLAS:
// 16 ranks may need 2 GiB of buffers.
//
// So tpx has OpenBLAS allocate the buffers before they are needed, each only after a trial
// mapping of its size and a margin has shown that it fits, and never lets more callers into BLAS
// than there are buffers for:
// - spmd reserves buffers for all its ranks before any starts (reserve_blas_buffers), while
//   nothing else of the process allocates, so no other allocation can come between a trial and
//   OpenBLAS's allocation. It reserves as many as fit; its ranks (threads marked by
//   wait_for_reserved_blas_buffers) then never make OpenBLAS allocate: when every buffer is in
//   use, a rank waits until a call ends. Only when not even one caller's buffer fits does a
//   rank's call throw blas_buffer_error (a std::bad_alloc, so spmd reports the rank as out of
//   memory). (Checking inside the ranks' own calls, as tpx first did, was not enough: between a
//   rank's trial and OpenBLAS's allocation another rank could create its malloc arena, 64 MiB of
//   address space, and the buffer no longer fitted: one run in ten of tpx-train --mesh 4x4 under
//   ulimit -v 700000 hung.)
// - The pool's threads may take their buffers after a reservation (OpenBLAS starts its pool
//   again, lazily, in a child after fork), so the reservation keeps one buffer aside for each
//   thread the pool may have: one fewer than the cores, or than the threads a call may use.
//   The reservation leaves address space to the ranks' own allocations (unless that leaves no
//   buffer at all): sharing fewer buffers, a mesh runs in less memory than its ranks' buffers
//   would take.
// - Any other thread (the main thread of an MPI rank, a user's own thread) that finds too few
//   buffers reserves more itself at the start of its call (with a 16 MiB margin: the buffer is
//   needed now); the trial then guards against everything but another thread's allocation in
//   the moment between trial and allocation.
// blas_entry, held around every call into BLAS (kernels/gemm_host.hpp), does the counting. Other
// builds of OpenBLAS use other sizes (32 to 256 MiB); a smaller one is only checked generously.
// blas_memory_alloc and blas_memory_free are OpenBLAS's own allocator, exported by every build of
// it; as with blas_threads.hpp, linking another BLAS fails at link time.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "tpx/kernels/blas_threads.hpp"

extern "C" {
void* blas_memory_alloc(int procpos);
void blas_memory_free(void* area);
int openblas_get_num_procs(void);
}

namespace tpx::kernels {

// One OpenBLAS work buffer as Debian builds it: BUFFER_SIZE (32 << 22 bytes) and a page.
inline constexpr std::size_t openblas_buffer_bytes = (std::size_t{32} << 22) + 4096;

class blas_buffer_error : public std::bad_alloc {
 public:
  // For the caller'th thread inside BLAS at the same moment (from 1).
  explicit blas_buffer_error(int caller)
      : message_("cannot allocate OpenBLAS's work buffer for caller number " +
                 std::to_string(caller) +
                 " (128 MiB for each thread inside BLAS at the same moment, and for each thread "
                 "of OpenBLAS's pool): fewer ranks per process, or more memory, would let it "
                 "run") {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

namespace blas_detail {
struct buffer_count {
  std::mutex mutex;
  std::condition_variable call_ended;
  int reserved = 0;  // buffers OpenBLAS surely has, as many as were once free at the same time
  int callers = 0;   // threads inside BLAS now
};
inline buffer_count& buffers() {
  static buffer_count count;
  return count;
}
// Whether this thread's calls wait for a reserved buffer instead of reserving more.
inline thread_local bool waits_for_reserved = false;

// Whether the kernel would give this process one more buffer's worth of address space now, and
// `margin` bytes more.
inline bool buffer_fits(std::size_t margin) {
  const std::size_t bytes = openblas_buffer_bytes + margin;
  void* region = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region == MAP_FAILED) return false;
  ::munmap(region, bytes);
  return true;
}

// The buffers OpenBLAS's pool may take after a reservation: one per thread it may have.
inline int pool_buffers() {
  static const int cores = openblas_get_num_procs();  // asked once: it may be a system call
  return std::max(cores, blas_threads()) - 1;
}

// Has OpenBLAS hold buffers for `callers` callers and its pool, as many as fit with `margin`
// bytes of address space to spare (count.mutex held); returns for how many callers it holds
// them. Held all at once, so OpenBLAS cannot hand out one buffer twice; every allocation follows
// a trial, also where OpenBLAS reuses a free buffer it had (the trial was then only too
// cautious).
inline int reserve_locked(buffer_count& count, int callers, std::size_t margin) {
  const int wanted = callers + pool_buffers();
  if (wanted > count.reserved) {
    std::vector<void*> held;
    held.reserve(static_cast<std::size_t>(wanted));
    while (static_cast<int>(held.size()) < wanted && buffer_fits(margin)) {
      void* buffer = blas_memory_alloc(0);
      if (buffer == nullptr) break;  // OpenBLAS's table is full
      held.push_back(buffer);
    }
    for (void* buffer : held) blas_memory_free(buffer);
    if (static_cast<int>(held.size()) > count.reserved) {
      count.reserved = static_cast<int>(held.size());
      count.call_ended.notify_all();  // more room for the threads that wait
    }
  }
  return std::max(0, count.reserved - pool_buffers());
}
}  // namespace blas_detail

// Has OpenBLAS allocate work buffers for up to `callers` threads inside BLAS at once, and for its
// own pool, as many as fit in memory with address space left for the callers' own allocations
// (256 MiB, and each caller's thread stack and malloc arena, 8 and 64 MiB with glibc's
// defaults), or, when not even one caller's buffer fits so, one caller's; returns for how many
// callers it holds them. Call it while no other thread of the process calls BLAS or allocates
// much (spmd does, before its ranks start).
inline int reserve_blas_buffers(int callers) {
  blas_detail::buffer_count& count = blas_detail::buffers();
  const std::lock_guard lock(count.mutex);
  const std::size_t room = (std::size_t{256} + std::size_t{72} * static_cast<std::size_t>(callers))
                           << 20;
  const int leaving_room = blas_detail::reserve_locked(count, callers, room);
  if (leaving_room > 0 || callers == 0) return leaving_room;
  return blas_detail::reserve_locked(count, 1, std::size_t{16} << 20);
}

// Makes this thread's BLAS calls wait for one of the reserved buffers when all are in use,
// rather than reserve more (spmd's ranks: see the top of the file).
inline void wait_for_reserved_blas_buffers() { blas_detail::waits_for_reserved = true; }

// Held by a thread for the length of one BLAS call (see the top of the file).
class blas_entry {
 public:
  blas_entry() : count_(blas_detail::buffers()) {
    std::unique_lock lock(count_.mutex);
    const int pool = blas_detail::pool_buffers();
    const auto room = [&] { return count_.callers + 1 + pool <= count_.reserved; };
    if (!room()) {
      if (!blas_detail::waits_for_reserved)
        blas_detail::reserve_locked(count_, count_.callers + 1, std::size_t{16} << 20);
      else if (1 + pool <= count_.reserved)
        count_.call_ended.wait(lock, room);
      if (!room()) throw blas_buffer_error(std::max(0, count_.reserved - pool) + 1);
    }
    ++count_.callers;
  }
  ~blas_entry() {
    {
      const std::lock_guard lock(count_.mutex);
      --count_.callers;
    }
    count_.call_ended.notify_all();
  }
  blas_entry(const blas_entry&) = delete;
  blas_entry& operator=(const blas_entry&) = delete;

 private:
  blas_detail::buffer_count& count_;
};

}  // namespace tpx::kernels

// host_block_cache: the blocks of host memory that tensors free, kept for the next tensor of the
// same size, as a GPU's memory pool keeps device memory (cuda/device_buffer.hpp) and PyTorch's
// caching allocator keeps CUDA memory.
//
// A training step makes and frees the same tensors every step: activations, gradients, the
// temporaries of each product. glibc's malloc serves a block of 128 KiB or more (its threshold
// grows with use, up to 32 MiB) with mmap and returns it with munmap, and trims the top of its
// heaps back to the system; so each step's activations arrived as fresh pages, which the kernel
// faults in and zeroes one by one. That was 10-15% of tpx-gpt's host step at 1x1 (perf: page
// faults, clear_page, unmaps). Blocks of at least `cached_from` bytes are therefore kept here when
// freed, by exact size (a step repeats its sizes exactly), and handed out again; smaller ones go
// straight to operator new and delete, whose free lists already reuse them without the kernel.
//
// What it keeps is bounded: at most limit() bytes, by default a quarter of the memory this
// process may use (physical memory, or the cgroup's limit where a container sets a lower one);
// TPX_HOST_BLOCK_CACHE_MIB sets it, 0 turns the cache off. A freed block that would not fit
// under the limit first has every kept block freed (sizes a program no longer makes do not stay),
// and is freed itself if it is larger than the limit. A tensor's allocation that fails gives back
// every kept block and tries once more. Kept blocks are not tensor memory: a rank's memory_meter
// counts what its tensors hold (tensor/memory_meter.hpp). Thread-safe (one mutex; a step makes a
// few hundred blocks; held across fork() by an atfork handler, so a child never inherits it
// locked), and never destroyed, so a buffer may be freed at any time, even during static
// destruction. Under AddressSanitizer (and HWASan, MemorySanitizer) it keeps nothing, so that a
// use of a freed tensor's memory, or a read of memory no tensor wrote, is still reported; under
// Valgrind, set TPX_HOST_BLOCK_CACHE_MIB=0 for the same. Define TPX_HOST_BLOCK_CACHE_OFF to 1 to
// compile it out.
#pragma once

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#ifndef TPX_HOST_BLOCK_CACHE_OFF
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_HWADDRESS__)
#define TPX_HOST_BLOCK_CACHE_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(hwaddress_sanitizer) || \
    __has_feature(memory_sanitizer)
#define TPX_HOST_BLOCK_CACHE_OFF 1
#endif
#endif
#endif
#ifndef TPX_HOST_BLOCK_CACHE_OFF
#define TPX_HOST_BLOCK_CACHE_OFF 0
#endif

namespace tpx {

class host_block_cache {
 public:
  static constexpr std::size_t cached_from = std::size_t{64} << 10;  // smaller blocks: operator new

  // The process's cache.
  static host_block_cache& instance() {
    static host_block_cache* const cache = [] {
      auto* c = new host_block_cache(limit_from_environment());
      pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                     [] { instance().mutex_.unlock(); });
      return c;
    }();
    return *cache;
  }

  // A cache that keeps at most `limit` bytes (0: none); instance() is the one tensors use.
  explicit host_block_cache(std::size_t limit) : limit_(TPX_HOST_BLOCK_CACHE_OFF ? 0 : limit) {}
  host_block_cache(const host_block_cache&) = delete;
  host_block_cache& operator=(const host_block_cache&) = delete;
  ~host_block_cache() { release(); }

  // A block of `bytes` (aligned for any type operator new aligns): a kept one of that size, or a
  // new one.
  void* take(std::size_t bytes) {
    if (bytes >= cached_from && limit_ != 0) {
      const std::lock_guard lock(mutex_);
      if (const auto it = kept_.find(bytes); it != kept_.end()) {
        void* block = it->second.back();
        it->second.pop_back();
        if (it->second.empty()) kept_.erase(it);
        kept_bytes_ -= bytes;
        return block;
      }
    }
    try {
      return ::operator new(bytes);
    } catch (const std::bad_alloc&) {
      if (release() == 0) throw;
      return ::operator new(bytes);
    }
  }

  // Takes back a block that take(bytes) gave: kept for reuse, or freed.
  void give(void* block, std::size_t bytes) noexcept {
    if (bytes >= cached_from && bytes <= limit_) {
      const std::lock_guard lock(mutex_);
      if (kept_bytes_ + bytes > limit_) free_kept();
      try {
        kept_[bytes].push_back(block);
        kept_bytes_ += bytes;
        return;
      } catch (const std::bad_alloc&) {  // no room to note it: free it instead, and drop the
        // empty list of its size that kept_[bytes] may have made (take() reads only kept blocks)
        if (const auto it = kept_.find(bytes); it != kept_.end() && it->second.empty()) kept_.erase(it);
      }
    }
    ::operator delete(block);
  }

  // Frees every kept block; returns how many bytes that gave back.
  std::size_t release() noexcept {
    const std::lock_guard lock(mutex_);
    return free_kept();
  }

  std::size_t kept_bytes() const {
    const std::lock_guard lock(mutex_);
    return kept_bytes_;
  }
  std::size_t limit() const { return limit_; }

  // TPX_HOST_BLOCK_CACHE_MIB if set (a count of MiB; 0 turns the cache off), else a quarter of
  // the memory this process may use: instance()'s limit, read once.
  static std::size_t limit_from_environment() {
    if (const char* mib = std::getenv("TPX_HOST_BLOCK_CACHE_MIB"); mib != nullptr && *mib != '\0') {
      char* end = nullptr;
      errno = 0;
      const unsigned long long value = std::strtoull(mib, &end, 10);
      if (*mib < '0' || *mib > '9' || *end != '\0' || errno == ERANGE ||
          value > (static_cast<std::size_t>(-1) >> 20))
        throw std::invalid_argument(std::string("tpx: TPX_HOST_BLOCK_CACHE_MIB=") + mib +
                                    ": not a whole number of MiB (0 turns the cache off)");
      return static_cast<std::size_t>(value) << 20;
    }
    return usable_memory() / 4;
  }

 private:
  // Physical memory, or the cgroup's (v2) memory.max where it is lower; 0 if unknown.
  static std::size_t usable_memory() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    std::size_t bytes = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * page : 0;
    std::ifstream cgroup("/sys/fs/cgroup/memory.max");
    unsigned long long max = 0;
    if (cgroup >> max && max > 0 && max < bytes) bytes = static_cast<std::size_t>(max);
    return bytes;  // "max" (no limit) does not parse as a number and leaves physical memory
  }

  // Frees every kept block; the caller holds mutex_.
  std::size_t free_kept() noexcept {
    for (auto& [bytes, blocks] : kept_)
      for (void* block : blocks) ::operator delete(block);
    kept_.clear();
    const std::size_t freed = kept_bytes_;
    kept_bytes_ = 0;
    return freed;
  }

  const std::size_t limit_;
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> kept_;  // no entry holds an empty list
  std::size_t kept_bytes_ = 0;
};

}  // namespace tpx

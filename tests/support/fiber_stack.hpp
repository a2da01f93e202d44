// fiber_stack: what one fiber of tests/support/fiber_team.hpp runs on. Its stack, mapped memory
// with a guard page below it, so that a fiber that overflows its stack faults instead of
// overwriting its neighbour's; and under ThreadSanitizer the runtime's state of the fiber
// (__tsan_create_fiber).
//
// Teams come and go, one per emulated thread block and so thousands per test, and both are
// costly to make: a fresh mapping costs page faults on first use, and TSan clears several
// pages of state for each new fiber (before this reuse, 70 % of the tsan column-totals test's
// time). So they outlive their team: take() reuses one this thread gave back, and the spares
// are released when the thread ends. A fiber's TSan state carries on from one team to the next
// like a thread's from one task to the next: what it knew happened before, did.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#define TPX_FIBER_TSAN 1
#elif defined(__SANITIZE_ADDRESS__)
#define TPX_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TPX_FIBER_TSAN 1
#elif __has_feature(address_sanitizer)
#define TPX_FIBER_ASAN 1
#endif
#endif
#if defined(TPX_FIBER_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace tpx::testing {

class fiber_stack {
 public:
  // Enough for the block programs under every build of the tests, AddressSanitizer's at -O0
  // included (its redzones make frames several times larger).
  static constexpr std::size_t bytes = std::size_t{64} << 10;

  static std::unique_ptr<fiber_stack> take() {
    auto& spares = spare_stacks();
    if (spares.empty()) return std::unique_ptr<fiber_stack>(new fiber_stack);
    std::unique_ptr<fiber_stack> reused = std::move(spares.back());
    spares.pop_back();
    return reused;
  }
  static void give_back(std::unique_ptr<fiber_stack> stack) {
    spare_stacks().push_back(std::move(stack));
  }

  ~fiber_stack() {
#if defined(TPX_FIBER_TSAN)
    forget_tsan_fiber();
#endif
    munmap(mapping_, bytes + guard_bytes_);
  }
  fiber_stack(const fiber_stack&) = delete;
  fiber_stack& operator=(const fiber_stack&) = delete;

  char* bottom() const { return static_cast<char*>(mapping_) + guard_bytes_; }

#if defined(TPX_FIBER_TSAN)
  void* tsan_fiber() {
    if (tsan_fiber_ == nullptr) tsan_fiber_ = __tsan_create_fiber(0);
    return tsan_fiber_;
  }
  // For a fiber that never returned: the next one on this stack starts with a fresh state.
  void forget_tsan_fiber() {
    if (tsan_fiber_ != nullptr) __tsan_destroy_fiber(tsan_fiber_);
    tsan_fiber_ = nullptr;
  }
#endif

 private:
  fiber_stack() : guard_bytes_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {
    mapping_ = mmap(nullptr, bytes + guard_bytes_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (mapping_ == MAP_FAILED) throw std::runtime_error("fiber_stack: cannot map a stack");
    if (mprotect(mapping_, guard_bytes_, PROT_NONE) != 0) {
      munmap(mapping_, bytes + guard_bytes_);
      throw std::runtime_error("fiber_stack: cannot protect a stack's guard page");
    }
  }

  static std::vector<std::unique_ptr<fiber_stack>>& spare_stacks() {
    thread_local std::vector<std::unique_ptr<fiber_stack>> spares;
    return spares;
  }

  std::size_t guard_bytes_;
  void* mapping_;
#if defined(TPX_FIBER_TSAN)
  void* tsan_fiber_ = nullptr;
#endif
};

}  // namespace tpx::testing

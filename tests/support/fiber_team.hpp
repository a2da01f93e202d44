// fiber_team: n functions run as fibers on the calling thread, taking turns, ordered only by the
// barriers they meet at. It is what tests/support/simt_block.hpp runs a thread block's lanes on.
//
// Lanes of an emulated block meet at a barrier for every warp operation. As OS threads, 128 of
// them on a few cores spent most of a test's time in the kernel switching between them (the
// flash attention test: 19 s of system time against 12 s of user time on 2 cores). As fibers
// (glibc's ucontext, each on a stack of fiber_stack.hpp) a switch is a swapcontext, and the
// scheduler is a loop: run each fiber that can go on until it waits at a barrier or returns,
// again until all have returned. When none can go on before all have returned, the program
// deadlocks (as it would on the GPU: lanes that reach barriers in different orders), and run()
// throws std::logic_error saying where each fiber waits, instead of hanging.
//
// Under ThreadSanitizer each fiber is a TSan fiber (__tsan_create_fiber) and every switch is
// declared no synchronization (__tsan_switch_to_fiber_no_sync): the only happens-before between
// fibers is what the barriers declare (__tsan_release by each fiber as it parks at a barrier or
// completes it, __tsan_acquire as it leaves), so a read of memory another fiber wrote with no
// barrier between them is reported as a data race, as between threads, although the fibers take
// turns on one thread (tests/unit/fiber_race_report.cpp proves it in CI). The scheduler's own
// state is atomic, relaxed: it orders nothing. Under AddressSanitizer the switches are announced
// (__sanitizer_start_switch_fiber and __sanitizer_finish_switch_fiber) so that ASan knows which
// stack is in use; its one line at the first switch, "ASan doesn't fully support
// makecontext/swapcontext functions and may produce false positives", is about programs that do
// not announce them.
#pragma once

#include <ucontext.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fiber_stack.hpp"  // also which sanitizer is on: TPX_FIBER_TSAN or TPX_FIBER_ASAN

#if defined(TPX_FIBER_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace tpx::testing {

class fiber_team {
  class fiber;

 public:
  // A barrier of `count` fibers of one team: arrive_and_wait() returns in each once all
  // `count` have arrived, as std::barrier's does for threads.
  class barrier {
   public:
    barrier(fiber_team& team, int count, std::string name)
        : team_(team), count_(count), name_(std::move(name)) {}
    barrier(const barrier&) = delete;
    barrier& operator=(const barrier&) = delete;

    void arrive_and_wait() {
      const std::uint64_t generation = generation_.load(std::memory_order_relaxed);
      if (arrived_.fetch_add(1, std::memory_order_relaxed) + 1 == count_) {
        arrived_.store(0, std::memory_order_relaxed);
        generation_.store(generation + 1, std::memory_order_relaxed);
#if defined(TPX_FIBER_TSAN)
        __tsan_release(this);
#endif
      } else {
        team_.wait_for(*this, generation);  // releases `this` as it parks
      }
#if defined(TPX_FIBER_TSAN)
      __tsan_acquire(this);
#endif
    }

   private:
    friend class fiber_team;
    fiber_team& team_;
    int count_;
    std::string name_;
    std::atomic<int> arrived_{0};
    std::atomic<std::uint64_t> generation_{0};
  };

  explicit fiber_team(int count) {
    fibers_.reserve(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) fibers_.push_back(std::make_unique<fiber>());
  }
  fiber_team(const fiber_team&) = delete;
  fiber_team& operator=(const fiber_team&) = delete;

  int size() const { return static_cast<int>(fibers_.size()); }

  // Runs body(i) for every i in [0, size()) as fibers of this thread, and returns when all have
  // returned. body must not throw (as a thread's function, an exception ends the program).
  // After a deadlock (std::logic_error) the barriers hold the stuck fibers' arrivals: the team
  // may run again only with new barriers.
  template <class Body>
  void run(const Body& body) {
    body_ = &body;
    call_body_ = [](const void* b, int i) { (*static_cast<const Body*>(b))(i); };
    start_all();
    schedule_until_all_returned();
  }

 private:
  class fiber {
   public:
    fiber() : stack(fiber_stack::take()) {}
    ~fiber() { fiber_stack::give_back(std::move(stack)); }
    fiber(const fiber&) = delete;
    fiber& operator=(const fiber&) = delete;

    std::unique_ptr<fiber_stack> stack;
    ucontext_t context{};
    std::atomic<const barrier*> waits_at{nullptr};
    std::atomic<std::uint64_t> waits_for_generation{0};
    std::atomic<bool> returned{false};
  };

  // The fiber that makecontext starts: it finds its team and index where start_all left them.
  static void entry() noexcept {
#if defined(TPX_FIBER_TSAN)
    __tsan_acquire(&starting_team());  // start_all's writes happen before this fiber's reads
#endif
    fiber_team& team = *starting_team();
#if defined(TPX_FIBER_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &team.scheduler_stack_, &team.scheduler_stack_bytes_);
#endif
    const int index = team.running_.load(std::memory_order_relaxed);
    team.call_body_(team.body_, index);
    fiber& self = *team.fibers_[static_cast<std::size_t>(index)];
#if defined(TPX_FIBER_TSAN)
    void* const scheduler = team.scheduler_tsan_fiber_;  // read before the release below
#endif
    self.returned.store(true, std::memory_order_relaxed);
#if defined(TPX_FIBER_TSAN)
    __tsan_release(&team.returned_);  // after its last access: the team may be destroyed next
#endif
#if defined(TPX_FIBER_ASAN)
    __sanitizer_start_switch_fiber(nullptr, team.scheduler_stack_, team.scheduler_stack_bytes_);
#endif
#if defined(TPX_FIBER_TSAN)
    __tsan_switch_to_fiber(scheduler, __tsan_switch_to_fiber_no_sync);
#endif
    setcontext(&team.scheduler_context_);
  }

  static fiber_team*& starting_team() {
    thread_local fiber_team* team = nullptr;
    return team;
  }

  void start_all() {
    starting_team() = this;
    for (auto& f : fibers_) {
      getcontext(&f->context);
      f->context.uc_stack.ss_sp = f->stack->bottom();
      f->context.uc_stack.ss_size = fiber_stack::bytes;
      f->context.uc_link = nullptr;
      makecontext(&f->context, &fiber_team::entry, 0);
      f->waits_at.store(nullptr, std::memory_order_relaxed);
      f->returned.store(false, std::memory_order_relaxed);
#if defined(TPX_FIBER_ASAN)
      // A reused stack may hold the poisoned redzones of a fiber that never returned.
      __asan_unpoison_memory_region(f->stack->bottom(), fiber_stack::bytes);
#endif
    }
#if defined(TPX_FIBER_TSAN)
    scheduler_tsan_fiber_ = __tsan_get_current_fiber();
    __tsan_release(&starting_team());  // after the last write the fibers may read
#endif
  }

  void schedule_until_all_returned() {
    int left = size();
    while (left > 0) {
      bool any_went_on = false;
      for (int i = 0; i < size(); ++i) {
        fiber& f = *fibers_[static_cast<std::size_t>(i)];
        if (f.returned.load(std::memory_order_relaxed) || !can_go_on(f)) continue;
        any_went_on = true;
        switch_to(i, f);
        if (f.returned.load(std::memory_order_relaxed)) --left;
      }
      if (!any_went_on) {
        std::string report = deadlock_report();
        end_fibers();
        throw std::logic_error(report);
      }
    }
    end_fibers();
  }

  // What follows every fiber's end, returned or stuck: under TSan, its accesses happen before
  // the scheduler's next ones (stuck fibers released their barrier as they parked).
  void end_fibers() {
#if defined(TPX_FIBER_TSAN)
    __tsan_acquire(&returned_);
    for (auto& f : fibers_) {
      if (f->returned.load(std::memory_order_relaxed)) continue;
      __tsan_acquire(const_cast<barrier*>(f->waits_at.load(std::memory_order_relaxed)));
      f->stack->forget_tsan_fiber();
    }
#endif
  }

  static bool can_go_on(const fiber& f) {
    const barrier* at = f.waits_at.load(std::memory_order_relaxed);
    return at == nullptr || at->generation_.load(std::memory_order_relaxed) !=
                                f.waits_for_generation.load(std::memory_order_relaxed);
  }

  void switch_to(int index, fiber& f) {
    running_.store(index, std::memory_order_relaxed);
#if defined(TPX_FIBER_ASAN)
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, f.stack->bottom(), fiber_stack::bytes);
#endif
#if defined(TPX_FIBER_TSAN)
    __tsan_switch_to_fiber(f.stack->tsan_fiber(), __tsan_switch_to_fiber_no_sync);
#endif
    swapcontext(&scheduler_context_, &f.context);
#if defined(TPX_FIBER_ASAN)
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  }

  // Called by the running fiber: it waits until `at` passes `generation`. Under TSan it
  // releases `at` after its last access before parking, so that on a deadlock run() can acquire
  // every barrier waited at and free what the stuck fibers touched.
  void wait_for(barrier& at, std::uint64_t generation) {
    fiber& self = *fibers_[static_cast<std::size_t>(running_.load(std::memory_order_relaxed))];
    self.waits_for_generation.store(generation, std::memory_order_relaxed);
    self.waits_at.store(&at, std::memory_order_relaxed);
#if defined(TPX_FIBER_ASAN)
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, scheduler_stack_, scheduler_stack_bytes_);
#endif
#if defined(TPX_FIBER_TSAN)
    void* const scheduler = scheduler_tsan_fiber_;
    __tsan_release(&at);
    __tsan_switch_to_fiber(scheduler, __tsan_switch_to_fiber_no_sync);
#endif
    swapcontext(&self.context, &scheduler_context_);
#if defined(TPX_FIBER_ASAN)
    __sanitizer_finish_switch_fiber(fake_stack, &scheduler_stack_, &scheduler_stack_bytes_);
#endif
    self.waits_at.store(nullptr, std::memory_order_relaxed);
  }

  // One line per run of consecutive fibers in the same state: "fibers 0-30: waiting at warp 0's
  // operation (31 of 32 arrived)".
  std::string deadlock_report() const {
    std::string report = "fiber_team: deadlock, no fiber can go on:";
    int first = 0;
    std::string first_state = state(0);
    for (int i = 1; i <= size(); ++i) {
      std::string next_state = i < size() ? state(i) : "";
      if (i < size() && next_state == first_state) continue;
      report += i - 1 == first ? "\n  fiber " : "\n  fibers ";
      report += std::to_string(first);
      if (i - 1 != first) (report += '-') += std::to_string(i - 1);
      report += first_state;
      first = i;
      first_state = std::move(next_state);
    }
    return report;
  }

  std::string state(int index) const {
    const fiber& f = *fibers_[static_cast<std::size_t>(index)];
    if (f.returned.load(std::memory_order_relaxed)) return ": returned";
    const barrier& at = *f.waits_at.load(std::memory_order_relaxed);
    std::string waits = ": waiting at ";
    waits += at.name_;
    waits += " (";
    waits += std::to_string(at.arrived_.load(std::memory_order_relaxed));
    waits += " of ";
    waits += std::to_string(at.count_);
    waits += " arrived)";
    return waits;
  }

  std::vector<std::unique_ptr<fiber>> fibers_;
  const void* body_ = nullptr;
  void (*call_body_)(const void*, int) = nullptr;
  std::atomic<int> running_{0};
  ucontext_t scheduler_context_{};
#if defined(TPX_FIBER_ASAN)
  const void* scheduler_stack_ = nullptr;
  std::size_t scheduler_stack_bytes_ = 0;
#endif
#if defined(TPX_FIBER_TSAN)
  void* scheduler_tsan_fiber_ = nullptr;
  char returned_ = 0;  // the address at which returning fibers release to the scheduler
#endif
};

}  // namespace tpx::testing

// tpx::in_background(rank, fn): run fn, typically a collective, on the rank's communication
// thread (communication_thread.hpp) while the calling thread goes on computing; pending.get()
// waits for fn's result. This is how a program overlaps communication with computation:
//
//   auto next = tpx::in_background(rank, [&] { return tpx::all_gather<X>(w[l + 1]); });
//   y = layer(y, w_full);           // computes while layer l + 1's weights are gathered
//   w_full = next.get();            // waits only for what the computation did not hide
//
// fn runs with every typed op unchanged: on the communication thread, rank_context::group
// hands out that thread's own communicators. Since every rank must start the same background
// tasks in the same order (they meet in that order), start them outside rank-dependent control
// flow, exactly as collectives. PyTorch calls the same thing an async collective's Work and
// FSDP2's unshard(async_op=True) handle, both waited for with wait(); tpx's result is a value,
// taken with get() like std::future's.
//
// On the CUDA launchers a rank has no communication thread but a background lane
// (spmd/background_lane.hpp): in_background runs fn at once on the rank's thread, which only
// queues work, with that work queued on the rank's second stream, and get() makes the rank's
// stream wait for it; the kernels queued in between run beside fn's collectives. So fn's inputs
// must stay unchanged until get(), as on the host, where the communication thread reads them.
// On a launcher with neither (MPI: see spmd.hpp), inside a background task, and on the
// communication thread itself, in_background runs fn at once, as at_once(fn) does; at_once is for
// programs that decide at run time whether to overlap (tpx-gpt's --overlap off): the same
// operations on the same data either way, so the same bits.
//
// A task that throws rethrows its exception from get(), and aborts the world on the way so that
// no rank waits for it (communication_thread.hpp). Destroying a pending result before get()
// waits for its task (on a lane: orders the rank's later work after it), like the future of
// std::async. communication_time(rank) is what a trainer reports: the rank's communication, all
// of it and the part it waited for.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "tpx/spmd/background_lane.hpp"
#include "tpx/spmd/communication_thread.hpp"
#include "tpx/spmd/rank_context.hpp"

namespace tpx {

namespace detail {
// What a background task leaves for get(): a T, or nothing for void.
template <class T>
class background_result : public background_task {
 public:
  T take() { return std::move(*value_); }

 protected:
  std::optional<T> value_;
};
template <>
class background_result<void> : public background_task {
 public:
  void take() {}
};

// fn and its result. fn, with whatever it captured (a partial gradient, say), is destroyed as
// soon as it has run, not when its result is taken.
template <class T, class Fn>
class background_call final : public background_result<T> {
 public:
  explicit background_call(Fn fn) : fn_(std::move(fn)) {}
  void run() override {
    if constexpr (std::is_void_v<T>)
      (*fn_)();
    else
      this->value_.emplace((*fn_)());
    fn_.reset();
  }

 private:
  std::optional<Fn> fn_;
};
}  // namespace detail

// The result of a task started by in_background (or computed by at_once), taken once by get().
template <class T>
class [[nodiscard]] pending {
 public:
  pending(pending&& other) noexcept
      : task_(std::move(other.task_)),
        thread_(other.thread_),
        join_(std::move(other.join_)),
        exceptions_at_start_(other.exceptions_at_start_) {}
  pending& operator=(pending&& other) noexcept {
    if (this != &other) {
      release();
      task_ = std::move(other.task_);
      thread_ = other.thread_;
      join_ = std::move(other.join_);
      exceptions_at_start_ = other.exceptions_at_start_;
    }
    return *this;
  }
  ~pending() { release(); }

  // Waits for the task and returns its result, or rethrows what it threw.
  T get() {
    if (!task_) throw std::logic_error("tpx: pending::get() called on a result already taken");
    const std::shared_ptr<detail::background_result<T>> task = std::move(task_);
    if (thread_ != nullptr)
      if (const std::exception_ptr failure = thread_->wait(*task)) std::rethrow_exception(failure);
    if (join_) std::exchange(join_, nullptr)->wait();
    return task->take();
  }

  // Whether get() may still be called.
  bool valid() const noexcept { return task_ != nullptr; }

 private:
  template <class Fn>
  friend auto in_background(const rank_context& rank, Fn&& fn);
  template <class Fn>
  friend auto at_once(Fn&& fn);
  template <class Fn>
  friend auto on_lane(background_lane& lane, Fn&& fn);

  // thread: where task runs, or null if it has run; join: what the rank's work waits for before
  // it uses the result, for a task whose work a lane has queued.
  pending(std::shared_ptr<detail::background_result<T>> task, communication_thread* thread,
          std::unique_ptr<lane_join> join = nullptr)
      : task_(std::move(task)), thread_(thread), join_(std::move(join)) {}

  // The result is destroyed only after the rank's work has been ordered after the task's: its
  // device memory is freed in the rank's order (a failed wait means a failed device, which the
  // rank's next operation reports).
  void release() noexcept {
    if (task_ && thread_ != nullptr)
      thread_->drop(*task_, std::uncaught_exceptions() > exceptions_at_start_);
    if (join_) {
      try {
        join_->wait();
      } catch (...) {
      }
      join_.reset();
    }
    task_.reset();
  }

  std::shared_ptr<detail::background_result<T>> task_;
  communication_thread* thread_ = nullptr;
  std::unique_ptr<lane_join> join_;
  int exceptions_at_start_ = std::uncaught_exceptions();  // more at release: one is passing
};

// fn(), computed now on the calling thread, as a pending result; an exception propagates here.
template <class Fn>
auto at_once(Fn&& fn) {
  using T = std::invoke_result_t<std::decay_t<Fn>&>;
  auto task = std::make_shared<detail::background_call<T, std::decay_t<Fn>>>(std::forward<Fn>(fn));
  task->run();
  return pending<T>(std::move(task), nullptr);
}

// fn(), run now with the work it queues on `lane`, which the result's get() waits for. If fn
// throws, the rank's later work waits for what it queued, and the exception propagates here.
template <class Fn>
auto on_lane(background_lane& lane, Fn&& fn) {
  using T = std::invoke_result_t<std::decay_t<Fn>&>;
  auto task = std::make_shared<detail::background_call<T, std::decay_t<Fn>>>(std::forward<Fn>(fn));
  lane.enter();
  try {
    task->run();
  } catch (...) {
    lane.leave()->wait();
    throw;
  }
  return pending<T>(std::move(task), nullptr, lane.leave());
}

// fn(), computed on rank's communication thread after the tasks started before it, on the rank's
// background lane where it has one instead, or at once (see the top of the file).
template <class Fn>
auto in_background(const rank_context& rank, Fn&& fn) {
  using T = std::invoke_result_t<std::decay_t<Fn>&>;
  communication_thread* thread = rank.communication();
  if (thread == nullptr) {
    background_lane* lane = rank.backend() != nullptr ? rank.backend()->lane() : nullptr;
    if (lane == nullptr || lane->entered()) return at_once(std::forward<Fn>(fn));
    return on_lane(*lane, std::forward<Fn>(fn));
  }
  if (detail::communication_thread_of == &rank) return at_once(std::forward<Fn>(fn));
  auto task = std::make_shared<detail::background_call<T, std::decay_t<Fn>>>(std::forward<Fn>(fn));
  thread->start(task);
  return pending<T>(std::move(task), thread);
}

// A rank's communication so far, in seconds of wall time: total, the time its own thread spent
// in collectives plus its communication thread's busy time; exposed, the time its own thread
// spent in collectives plus the part of the busy time it waited for. Without background tasks
// the two are equal. A backend that queues its collectives measures them itself (CUDA: on the
// device, cuda/communication_clock.hpp), since the thread's time there is only that of queueing.
inline communication_seconds communication_time(const rank_context& rank) {
  if (rank.backend() != nullptr)
    if (const auto measured = rank.backend()->measured_communication()) return *measured;
  const double own = rank.collective_seconds();
  const communication_thread* thread = rank.communication();
  if (thread == nullptr) return {own, own};
  return {own + thread->busy_seconds(), own + thread->exposed_seconds()};
}

}  // namespace tpx

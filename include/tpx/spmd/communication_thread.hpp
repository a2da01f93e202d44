// communication_thread: a thread beside a rank's own that runs the rank's background tasks
// (tpx::in_background, background.hpp) one after another in the order they were started, so
// that the rank's collectives overlap its computation: FSDP's all-gather of the next block's
// weights while this block computes, the gradients' reduce-scatters during the rest of the
// backward pass (PyTorch FSDP2 runs the same two on CUDA streams of their own).
//
// Every rank starts the same tasks in the same order (SPMD), so the communication threads of a
// group meet in their collectives in that order. They meet on communicators of their own
// (rank_context::group picks them by the calling thread): host groups match calls by arrival
// order, and a rank's two threads sharing one would pair a background all-gather with a peer's
// foreground one. The host launcher (spmd.hpp) gives every rank a communication thread, started
// by its first task; other launchers give none, and in_background runs the task at once.
//
// Failures reach every rank, and no thread is left waiting:
//   - A task that throws reports its failure to the launcher, which aborts the world, so every
//     collective of every rank, on either thread, fails at once naming the rank and the error
//     (a comm_error names the collective). The group's communication threads would in any case
//     meet out of order after it. The exception is rethrown where the task is waited for
//     (pending::get).
//   - A pending result destroyed unfinished while an exception passes (the rank is failing)
//     reports that before waiting for its task: the task may be in a collective that its peers
//     join only after this rank's own thread, now unwinding, would have met them in another.
//   - The launcher joins the thread before the rank counts as returned (HostWorld::finish), so a
//     background collective that a returned rank never joined fails at once as well.
//   - Ranks whose threads wait for each other in a cycle (rank 0's own thread in a collective
//     that rank 1's own thread would join once its background gather completes, which waits for
//     rank 0's communication thread, idle until rank 0 starts that gather after its collective)
//     fail at once with the wait-for picture: the thread tells the launcher when the rank's own
//     thread waits for a task and when the communication thread has none (idle_report), so that
//     its deadlock check (comm/host_waits.hpp) sees both threads of every rank.
//
// Time: busy_seconds() is the time the thread has spent running tasks (the casts before the
// gathers and the collectives): all of the rank's background communication. exposed_seconds()
// is the part of it during which the rank's own thread was waiting for a task: the background
// communication the computation did not hide. A wait counts only the time a task was running
// meanwhile, not the moments the waiting thread needs to wake up, so exposed never exceeds busy.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "tpx/comm/host_waits.hpp"
#include "tpx/spmd/rank_context.hpp"

namespace tpx {

namespace detail {
// A task queued on a communication thread. run() is called once, on that thread; the thread
// records under its mutex whether it is done and how it failed.
class background_task {
 public:
  virtual ~background_task() = default;
  virtual void run() = 0;

 private:
  friend class tpx::communication_thread;
  bool done_ = false;
  std::exception_ptr failure_;
};
}  // namespace detail

class communication_thread {
 public:
  // Called on the communication thread with the error of a task that threw; never throws (the
  // host launcher's aborts its HostWorld).
  using failure_report = std::function<void(std::string_view what)>;
  // Called with the communication thread's lock held when one of the rank's threads becomes
  // idle, waiting only for the other, or stops being idle; the communication thread is idle
  // until its first task (the host launcher's records it in its HostWorld).
  using idle_report = std::function<void(detail::RankThread, bool idle)>;

  communication_thread(const rank_context& rank, failure_report report, idle_report idle)
      : rank_(rank), report_(std::move(report)), report_idle_(std::move(idle)) {}
  communication_thread(const communication_thread&) = delete;
  communication_thread& operator=(const communication_thread&) = delete;

  // Joins the thread; tasks still queued (their pending results outlived the rank's function)
  // are reported as a failure first, so that they cannot wait for peers that have gone.
  ~communication_thread() {
    bool busy = false;
    {
      std::lock_guard lock(mutex_);
      busy = running_ || !queue_.empty();
    }
    if (busy) report_("its communication thread still had background tasks when the rank ended");
    stop();
  }

  // Queues task after the tasks started before it, starting the thread if this is the first.
  void start(std::shared_ptr<detail::background_task> task) {
    std::lock_guard lock(mutex_);
    if (stopping_)
      throw std::logic_error("tpx: a background task was started after its rank ended");
    if (!thread_.joinable()) {
      try {
        thread_ = std::thread([this] { serve(); });
      } catch (const std::system_error& e) {
        throw std::system_error(e.code(), "tpx: rank " + std::to_string(rank_.world_rank()) +
                                              ": its communication thread could not be started");
      }
    }
    queue_.push_back(std::move(task));
    set_idle(detail::RankThread::communication, false);
    work_.notify_one();
  }

  // Waits until task has run; returns how it failed, or null. The time a task runs meanwhile
  // counts as exposed.
  std::exception_ptr wait(detail::background_task& task) {
    std::unique_lock lock(mutex_);
    wait_locked(lock, task);
    return task.failure_;
  }

  // For a pending result destroyed before its task was waited for: waits for the task, first
  // reporting a failure if an exception is passing (see the top of the file); a failure of the
  // task that nobody else saw is kept for finish().
  void drop(detail::background_task& task, bool unwinding) noexcept {
    std::unique_lock lock(mutex_);
    if (!task.done_ && unwinding) {
      lock.unlock();
      report_(
          "an exception left its background collectives unfinished; that exception is the "
          "rank's error");
      lock.lock();
    }
    wait_locked(lock, task);
    if (task.failure_ && !unobserved_) unobserved_ = task.failure_;
  }

  // After the rank's function returned: joins the thread, then rethrows the failure of a task
  // whose result was dropped unread, if any, as the rank's error.
  void finish() {
    stop();
    if (unobserved_) std::rethrow_exception(unobserved_);
  }

  double busy_seconds() const {
    std::lock_guard lock(mutex_);
    return busy_at(clock::now()).count();
  }
  double exposed_seconds() const {
    std::lock_guard lock(mutex_);
    return exposed_.count();
  }

 private:
  using clock = std::chrono::steady_clock;
  using seconds = std::chrono::duration<double>;

  // The thread's body: runs the queue until stop() and the queue is empty.
  void serve() {
    detail::communication_thread_of = &rank_;
    std::unique_lock lock(mutex_);
    for (;;) {
      if (queue_.empty()) set_idle(detail::RankThread::communication, true);
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      const std::shared_ptr<detail::background_task> task = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      running_since_ = clock::now();
      lock.unlock();
      std::exception_ptr failure;
      try {
        task->run();
      } catch (const std::exception& e) {
        failure = std::current_exception();
        report_(e.what());
      } catch (...) {
        failure = std::current_exception();
        report_("a background task threw a non-standard exception");
      }
      lock.lock();
      busy_ += clock::now() - running_since_;
      running_ = false;
      task->failure_ = failure;
      task->done_ = true;
      if (awaited_ == task.get()) set_idle(detail::RankThread::own, false);  // before going idle
      finished_.notify_all();
    }
  }

  void stop() noexcept {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // The busy time up to `now`, the running task's part included. mutex_ held.
  seconds busy_at(clock::time_point now) const {
    return busy_ + (running_ ? seconds(now - running_since_) : seconds(0));
  }

  // mutex_ held by lock.
  void wait_locked(std::unique_lock<std::mutex>& lock, const detail::background_task& task) {
    if (task.done_) return;
    const seconds busy_before = busy_at(clock::now());
    awaited_ = &task;
    set_idle(detail::RankThread::own, true);
    finished_.wait(lock, [&] { return task.done_; });
    awaited_ = nullptr;
    exposed_ += busy_at(clock::now()) - busy_before;
  }

  // Reports a change of idleness (see idle_report). mutex_ held.
  void set_idle(detail::RankThread thread, bool idle) {
    bool& now = thread == detail::RankThread::own ? own_idle_ : communication_idle_;
    if (now == idle) return;
    now = idle;
    report_idle_(thread, idle);
  }

  const rank_context& rank_;
  const failure_report report_;
  const idle_report report_idle_;
  std::thread thread_;

  mutable std::mutex mutex_;          // guards everything below and every queued task's outcome
  std::condition_variable work_;      // a task was queued, or stop()
  std::condition_variable finished_;  // a task is done
  std::deque<std::shared_ptr<detail::background_task>> queue_;
  bool stopping_ = false;
  bool running_ = false;
  const detail::background_task* awaited_ = nullptr;  // the task the rank's own thread waits for
  bool own_idle_ = false;
  bool communication_idle_ = true;  // as reported: idle until the first task
  clock::time_point running_since_;
  seconds busy_{0};
  seconds exposed_{0};
  std::exception_ptr unobserved_;
};

}  // namespace tpx

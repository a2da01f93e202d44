// replay_tape: a host stand-in for a CUDA graph, so that code meant to be recorded once and
// replayed (tpx::recorded_step, spmd/recorded_work.hpp) can be proven replayable on any machine.
//
// While a rank thread records, the stand-in space and group (recording_space.hpp) append each
// operation to the tape, with its arguments as they were at that moment, instead of running it;
// a replay runs the tape. That is what stream capture does: the work's host code runs once, and a
// host value it passes (a step number, a learning rate, a pointer) is frozen into the recording.
// Memory follows the graph's rules too. A buffer freed while recording is kept by the tape, as a
// graph keeps its memory, so the replays reuse it at the same address and never touch freed
// memory. The library's recording_ledger (spmd/recording_ledger.hpp), which the CUDA backend
// keeps the same way, checks the memory rules of recorded_work.hpp when the recording ends.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <tpx/spmd/rank_context.hpp>
#include <tpx/spmd/recorded_work.hpp>
#include <tpx/spmd/recording_ledger.hpp>

namespace tpx::testing {

class replay_tape {
 public:
  // The tape this thread is recording on, or null.
  static replay_tape*& recording() {
    thread_local replay_tape* tape = nullptr;
    return tape;
  }

  // op recorded if this thread is recording, else run now.
  template <class Op>
  static void run_or_record(Op op) {
    if (replay_tape* tape = recording())
      tape->operations_.emplace_back(std::move(op));
    else
      op();
  }

  // n elements from `from` to `to` (a device-to-device copy), run now or recorded.
  template <class T>
  static void copy(const T* from, std::size_t n, T* to) {
    if (n > 0) run_or_record([from, n, to] { std::copy_n(from, n, to); });
  }

  // Memory freed while recording: the recording's from then on.
  void keep(std::shared_ptr<void> storage) { kept_.push_back(std::move(storage)); }

  void replay() const {
    for (const std::function<void()>& op : operations_) op();
  }
  std::size_t operations() const { return operations_.size(); }

 private:
  std::vector<std::function<void()>> operations_;
  std::vector<std::shared_ptr<void>> kept_;
};

// This thread records on `tape` while the scope lives.
class tape_recording_scope {
 public:
  explicit tape_recording_scope(replay_tape& tape) : previous_(replay_tape::recording()) {
    replay_tape::recording() = &tape;
  }
  ~tape_recording_scope() { replay_tape::recording() = previous_; }
  tape_recording_scope(const tape_recording_scope&) = delete;
  tape_recording_scope& operator=(const tape_recording_scope&) = delete;

 private:
  replay_tape* previous_;
};

// A backend that records on a tape, as the CUDA backend records a graph: set it on a rank
// (rank_context::set_backend) whose tensors live in recording_space.
class tape_backend final : public backend_state {
 public:
  std::unique_ptr<recorded_work> record(const std::function<void()>& work) override {
    auto tape = std::make_shared<replay_tape>();
    recording_ledger ledger;
    {
      const tape_recording_scope on_tape(*tape);
      const recording_ledger::scope entered(ledger);
      work();
    }
    ledger.check();
    ++recordings_;
    operations_ = tape->operations();
    return std::make_unique<tape_replay>(std::move(tape), replays_);
  }

  int recordings() const { return recordings_; }
  int replays() const { return replays_; }
  // Operations on the last tape recorded.
  std::size_t operations() const { return operations_; }

 private:
  class tape_replay final : public recorded_work {
   public:
    tape_replay(std::shared_ptr<const replay_tape> tape, int& count)
        : tape_(std::move(tape)), count_(count) {}
    void replay() override {
      ++count_;
      tape_->replay();
    }

   private:
    std::shared_ptr<const replay_tape> tape_;
    int& count_;
  };

  int recordings_ = 0;
  int replays_ = 0;
  std::size_t operations_ = 0;
};

}  // namespace tpx::testing

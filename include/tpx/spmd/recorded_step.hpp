// tpx::recorded_step: a step of a program that the rank's backend records the first time it runs
// and replays after: on CUDA, a training step's hundreds of kernel launches become one graph
// launch (cuda/step_graph.hpp), which is what a small, launch-bound step needs. Where the backend
// does its work as it is called (the host), the step runs as written every time.
//
//   tpx::recorded_step replayed;
//   for (int s = first; s < steps; ++s) {
//     tpx::copy_from_host(tokens, batch_of(s));            // the step's input, in the same tensor
//     replayed(rank, [&] { loss = ...; tpx::assign(loss_out, loss); });   // the same buffers
//   }
//
// The work must follow the rules of spmd/recorded_work.hpp: what changes between replays is in
// memory it reads, it frees what it allocates, and it does not cross to the host. Run it once
// unrecorded first (the trainer does), so that what a first call sets up for good (GEMM plans, a
// background lane's stream and workspace) is not made inside the recording.
//
// Only a rank alone in its world records (mesh 1x1, on any CUDA launcher: NCCL's calls are
// recorded too). The ranks of tpx::cuda_simulated meet on the host in every collective and wait
// for each other's streams, which a replay would skip; NCCL collectives between ranks can be
// recorded, but tpx's NCCL communicator watches each one's completion for its timeout, which a
// replay would bypass (not yet done). When the step cannot be recorded (the backend throws, or
// the world has more ranks), it runs as written from then on and failure() says why, for the
// program to report; an error of the work itself then recurs unrecorded and propagates.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "tpx/spmd/rank_context.hpp"

namespace tpx {

class recorded_step {
 public:
  // Runs work: recorded and replayed from the first call where the rank's backend records it,
  // else as written.
  template <class Work>
  void operator()(const rank_context& rank, Work& work) {
    if (!tried_) {
      tried_ = true;
      try_to_record(rank, work);
    }
    if (recording_)
      recording_->replay();
    else
      work();
  }

  // Whether the calls replay a recording.
  bool recorded() const { return recording_ != nullptr; }
  // Why a backend that records could not record the step; empty if it did, or does not record.
  const std::string& failure() const { return failure_; }

 private:
  void try_to_record(const rank_context& rank, const std::function<void()>& work) {
    backend_state* backend = rank.backend();
    if (backend == nullptr) return;
    if (rank.world_size() > 1) {
      failure_ = "only a rank alone in its world records its step (this world has " +
                 std::to_string(rank.world_size()) +
                 " ranks, whose collectives meet on the host at every call)";
      return;
    }
    try {
      recording_ = backend->record(work);
    } catch (const std::exception& e) {
      failure_ = e.what();
    }
  }

  bool tried_ = false;
  std::unique_ptr<recorded_work> recording_;
  std::string failure_;
};

}  // namespace tpx

// recorded_work: work a backend has recorded once and can queue again, whole, at the cost of one
// launch: CUDA graphs (cuda/step_graph.hpp). A backend that queues its work offers to record it
// (backend_state::record, rank_context.hpp); tpx::recorded_step (spmd/recorded_step.hpp) is how a
// program asks, and what it does where no backend records.
//
// A recording holds the work as it was queued: the same kernels on the same buffers with the same
// arguments. What changes from one replay to the next must therefore be in memory the recording
// reads (a batch copied into the same input tensor, a step number the work advances itself), and
// the work must free every buffer it allocates and none allocated before it (a backend refuses a
// recording that breaks these: spmd/recording_ledger.hpp). PyTorch's torch.cuda.CUDAGraph asks
// the same of its users ("static" inputs and outputs); tpx's trainer shows the pattern
// (examples/trainer/recorded_training.hpp; tests/support/replay_tape.hpp proves it on the host).
#pragma once

namespace tpx {

class recorded_work {
 public:
  virtual ~recorded_work() = default;
  // Queues the recorded work again, as a whole, on the rank's stream.
  virtual void replay() = 0;
};

}  // namespace tpx

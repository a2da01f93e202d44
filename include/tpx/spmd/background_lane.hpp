// background_lane: how a backend whose work is queued rather than done (CUDA: kernels and
// collectives go to streams and the host returns at once) runs a rank's background tasks
// (tpx::in_background, background.hpp) without a communication thread.
//
// On such a backend the rank's thread only queues work, so a background task can run on it at
// once; what must differ is where its work is queued. enter() diverts the rank's work to the
// lane (CUDA: a second stream of the rank's, rank_resources.hpp), ordered after everything the
// rank queued before; leave() turns it back to the rank's own queue and returns the lane_join
// that pending::get() waits on: it orders the rank's later work after the task's, without
// blocking the host. Work the rank queues between leave() and that wait runs alongside the task's
// (the next block's computation beside the gather of its weights), as on the communication
// thread of the host backend. The lane runs tasks one after another in the order they were
// started, so the ranks of a group meet in their collectives in that order.
//
// PyTorch FSDP2 does the same with its all-gather and reduce-scatter streams and
// Stream.wait_stream; the lane makes it a property of the backend, so a program overlaps by
// calling in_background on any launcher.
#pragma once

#include <memory>

namespace tpx {

// What the rank's later work must wait for: the work of one background task.
class lane_join {
 public:
  virtual ~lane_join() = default;
  // Orders the rank's work queued from now on after the task's (never blocks the host).
  virtual void wait() = 0;
};

class background_lane {
 public:
  virtual ~background_lane() = default;
  // The rank's work goes to the lane from now on, after all it queued before.
  virtual void enter() = 0;
  // The rank's work goes to its own queue again; the join orders it after the lane's work.
  virtual std::unique_ptr<lane_join> leave() = 0;
  // Whether the rank's work goes to the lane now (between enter and leave).
  virtual bool entered() const = 0;
};

}  // namespace tpx

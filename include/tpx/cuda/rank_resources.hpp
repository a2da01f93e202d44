// rank_resources: what one rank of a CUDA mesh owns on its GPU: the device, a stream, the
// device's memory pool, the cuBLASLt handle, workspace and plan cache of its GEMMs, and the
// pinned buffer its uploads pass through (host_staging.hpp).
//
// A CUDA launcher makes one per rank, on the rank's thread, and hands it to the rank's
// rank_context (rank_context::set_backend); the device space (device_space.hpp) finds it with
// resources_of(ctx) whenever a tensor of that rank allocates, copies, multiplies or runs a
// kernel. Every such operation is queued on the rank's one stream, so a rank's work is ordered
// as its program is written, while different ranks (threads sharing a GPU in the simulated mesh)
// run concurrently. Allocation goes through the device's default memory pool with its release
// threshold raised to "never", so memory freed in one training step is reused by the next
// without returning to the driver (no cudaMalloc per step); the pool is per device, and shared
// by every rank (and library) using the device in this process.
//
// The rank's background lane (spmd/background_lane.hpp) is a second stream, made at its first
// background task: while a task runs (tpx::in_background: FSDP's gather of the next block's
// weights, a gradient's reduce-scatter), stream() is the lane's, which first waits for the rank's
// stream, so the task's casts, copies and collectives queue there, beside the kernels the rank
// queues after it; the task's join makes the rank's stream wait for the lane. Tensor buffers free
// on whichever stream is current when they are freed (device_buffer.hpp), and the lane's GEMMs
// have a workspace of their own, since the two streams' GEMMs may run at once. The rank's
// communication is timed on the device (communication_clock.hpp): tpx::communication_time reads it,
// and so are its phases when a tpx::phase_timing asks for a clock (phase_clock.hpp).
//
// record(work) captures what the work queues as a CUDA graph (step_graph.hpp) for
// tpx::recorded_step. Meanwhile recording() is true: the device space then refuses copies to and
// from the host (a replay would repeat the recorded bytes, and a read would wait on work that has
// not run), and the clock is paused; and a recording_ledger (spmd/recording_ledger.hpp) checks
// that the work frees exactly the buffers it makes, refusing the graph if not. A graph's
// allocations have memory of their own, so a recording trims the pool of what it keeps.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/communication_clock.hpp"
#include "tpx/cuda/gemm_plan.hpp"
#include "tpx/cuda/host_staging.hpp"
#include "tpx/cuda/phase_clock.hpp"
#include "tpx/cuda/step_graph.hpp"
#include "tpx/cuda/stream.hpp"
#include "tpx/spmd/phase_clock.hpp"
#include "tpx/spmd/rank_context.hpp"
#include "tpx/spmd/recording_ledger.hpp"

namespace tpx::cuda {

struct rank_options {
  // Multiply fp32 tensors on TF32 tensor cores (as torch.backends.cuda.matmul.allow_tf32).
  bool tf32 = false;
  // The cuBLASLt workspace of each rank (32 MiB is NVIDIA's advice for Hopper).
  std::size_t gemm_workspace_bytes = std::size_t{32} << 20;
};

class rank_resources final : public backend_state, public background_lane, public phase_clock_source {
 public:
  // Makes `device` current on the calling thread and sets up the rank there.
  rank_resources(int device, const rank_options& options)
      : device_(select(device)),
        pool_(default_pool(device)),
        gemm_(options.gemm_workspace_bytes, pool_, stream_.get()),
        options_(options) {}
  rank_resources(const rank_resources&) = delete;
  rank_resources& operator=(const rank_resources&) = delete;

  int device() const { return device_; }
  // The stream the rank's work goes to now: its own, or the lane's while a background task runs.
  cudaStream_t stream() const { return current_; }
  // The same, read again at each use: for the buffers of the rank's tensors.
  stream_ref current_stream() const { return stream_ref(&current_); }
  cudaMemPool_t pool() const { return pool_; }
  gemm_plans& gemms() { return entered() ? *lane_gemm_ : gemm_; }
  const rank_options& options() const { return options_; }
  host_staging& staging() { return staging_; }
  // Where the rank's communicators time their work (communication_clock.hpp).
  communication_clock& clock() { return clock_; }
  std::optional<communication_seconds> measured_communication() override { return clock_.totals(); }
  // A phase clock on the rank's own stream (phase_clock.hpp).
  std::unique_ptr<tpx::phase_clock> make_phase_clock() override {
    return std::make_unique<cuda::phase_clock>(stream_.get());
  }

  // Waits for everything queued on the rank's streams; reports a fault of any of it.
  void synchronize() const {
    stream_.synchronize();
    if (lane_stream_) lane_stream_->synchronize();
  }

  // Whether record() is capturing the rank's work now.
  bool recording() const { return recording_; }
  std::unique_ptr<recorded_work> record(const std::function<void()>& work) override {
    if (entered()) throw std::logic_error("tpx: rank_resources::record: called inside a background task");
    recording_ = true;
    clock_.pause(true);
    struct resume {
      rank_resources* rank;
      ~resume() {
        rank->recording_ = false;
        rank->clock_.pause(false);
      }
    } resumed{this};
    recording_ledger ledger;
    std::unique_ptr<recorded_work> graph;
    try {
      const recording_ledger::scope entered(ledger);
      graph = record_graph(stream_.get(), work);
    } catch (...) {
      // Freeing memory the graph did not allocate fails the capture itself; the broken rule says
      // more than CUDA's error about it.
      ledger.check();
      throw;
    }
    ledger.check();
    // The step's temporaries come from the graph's own memory from now on, which its first launch
    // maps: what the pool kept of the unrecorded steps' goes back to the device first, so that
    // the device does not hold them twice (cudaMemPoolTrimTo releases only memory not in use).
    TPX_CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
    return graph;
  }

  // The background lane (see the top of the file).
  background_lane* lane() override { return this; }
  void enter() override {
    if (entered()) throw std::logic_error("tpx: rank_resources::enter: a background task is already on the lane");
    if (!lane_stream_) {
      lane_stream_.emplace();
      lane_gemm_.emplace(options_.gemm_workspace_bytes, pool_, lane_stream_->get());
    }
    lane_ready_.record(stream_.get());
    lane_stream_->wait_for(lane_ready_);
    current_ = lane_stream_->get();
  }
  std::unique_ptr<lane_join> leave() override {
    if (!entered()) throw std::logic_error("tpx: rank_resources::leave: no background task is on the lane");
    auto join = std::make_unique<lane_done>(*this);
    current_ = stream_.get();
    return join;
  }
  bool entered() const override { return current_ != stream_.get(); }

 private:
  static int select(int device) {
    TPX_CUDA_CHECK(cudaSetDevice(device));
    return device;
  }
  static cudaMemPool_t default_pool(int device) {
    cudaMemPool_t pool = nullptr;
    TPX_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    std::uint64_t keep_everything = std::numeric_limits<std::uint64_t>::max();
    TPX_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
    return pool;
  }

  // What the rank's stream waits for before it uses a task's result: the lane's work until then,
  // on whichever stream the rank's work goes to when it waits.
  class lane_done final : public lane_join {
   public:
    explicit lane_done(rank_resources& rank) : rank_(&rank) { done_.record(rank.current_); }
    // Waited for on the rank's own stream, the wait is exposed communication (inside a later task,
    // on the lane, it is already ordered).
    void wait() override {
      const auto join = [&] { TPX_CUDA_CHECK(cudaStreamWaitEvent(rank_->stream(), done_.get(), 0)); };
      if (rank_->entered())
        join();
      else
        rank_->clock_.time(rank_->stream(), communication_clock::exposed, join);
    }

   private:
    rank_resources* rank_;
    event done_;
  };

  int device_;
  cudaMemPool_t pool_;
  cuda::stream stream_;
  gemm_plans gemm_;
  rank_options options_;
  std::optional<cuda::stream> lane_stream_;  // the background lane, from its first task
  std::optional<gemm_plans> lane_gemm_;      // the lane's GEMMs, with a workspace of their own
  event lane_ready_;                         // the lane waits for the rank's work up to here
  cudaStream_t current_ = stream_.get();
  bool recording_ = false;
  communication_clock clock_;
  host_staging staging_;  // last: its destructor waits for the stream's last upload
};

// The CUDA resources of the rank a tensor belongs to.
inline rank_resources& resources_of(const rank_context& ctx) {
  auto* resources = dynamic_cast<rank_resources*>(ctx.backend());
  if (resources == nullptr)
    throw std::logic_error("tpx: rank " + std::to_string(ctx.world_rank()) +
                           " has no CUDA resources: device tensors need a rank started by a CUDA launcher "
                           "(spmd(tpx::cuda_simulated, ...), spmd(tpx::cuda_devices, ...) or cuda::run_rank)");
  return *resources;
}

}  // namespace tpx::cuda

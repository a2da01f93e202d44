// step_graph: a rank's work recorded as a CUDA graph (tpx::recorded_work, spmd/recorded_work.hpp),
// for tpx::recorded_step (spmd/recorded_step.hpp) on a CUDA rank (rank_resources::record).
//
// record_graph captures what `work` queues on the rank's stream (cudaStreamBeginCapture), and on
// any stream it makes wait for that stream, as a background lane does, until those join it again;
// the work does not run then. The graph is instantiated once; replay() launches it whole on the
// stream, so a step of a few hundred small kernels costs one launch instead of a few hundred
// (NVIDIA's "CUDA Graphs" guide; torch.cuda.CUDAGraph and JAX's XLA:GPU command buffers do the
// same). Allocations the work makes from the rank's pool become the graph's own memory, allocated
// and freed within every launch; a buffer allocated inside and not freed there would fail the
// next launch (no cudaGraphInstantiateFlagAutoFreeOnLaunch: it would free memory a tensor still
// points to), which is why rank_resources::record refuses such work (spmd/recording_ledger.hpp).
//
// Capture is per thread (cudaStreamCaptureModeThreadLocal): the other ranks' threads of the
// process go on. A call the capture forbids (a synchronization, an event query, a host copy)
// fails the capture with CUDA's error, which record_graph throws after ending the capture and
// taking the error from CUDA's last-error slot (where the next kernel launch's check would find
// it as its own), so the stream is usable again and the caller can run the work unrecorded.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "tpx/cuda/check.hpp"
#include "tpx/spmd/recorded_work.hpp"

namespace tpx::cuda {

class graph_replay final : public recorded_work {
 public:
  graph_replay(cudaGraphExec_t graph, cudaStream_t stream) : graph_(graph), stream_(stream) {}
  graph_replay(const graph_replay&) = delete;
  graph_replay& operator=(const graph_replay&) = delete;
  ~graph_replay() override { cudaGraphExecDestroy(graph_); }

  void replay() override { TPX_CUDA_CHECK(cudaGraphLaunch(graph_, stream_)); }

 private:
  cudaGraphExec_t graph_;
  cudaStream_t stream_;
};

// The work `work` queues on `stream`, recorded as a graph ready to launch on it.
inline std::unique_ptr<recorded_work> record_graph(cudaStream_t stream,
                                                   const std::function<void()>& work) {
  TPX_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    work();
  } catch (...) {
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr)
      cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // a failed capture leaves its error for the next check to find
    throw;
  }
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = ended == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : ended;
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    (void)cudaGetLastError();  // the error is thrown here, not left for the next launch's check
    detail::check_cuda(made, ended == cudaSuccess ? "cudaGraphInstantiate" : "cudaStreamEndCapture",
                       __FILE__, __LINE__);
  }
  return std::make_unique<graph_replay>(exec, stream);
}

}  // namespace tpx::cuda

// The AdamW step on the device: kernels::adamw_update (kernels/optimizer.hpp), the functor the
// host optimizer runs, applied to every element of a parameter shard.
//
// The parameters it updates are the fp32 master weights, with fp32 moments m and v; the
// gradient may be stored in bf16 or fp32. When the model computes in bf16, `model` receives the
// updated weights rounded to bf16 in the same pass (or pass nullptr). The clipping factor is read
// from device memory (`scale`, computed there from the global gradient norm), so the step never
// waits for the host; so may the step number be (`step`), so that a step recorded as a CUDA graph
// replays with the step number of each replay. One thread per element,
// grid-stride: the step is memory-bound and its five streams are read and written coalesced.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/kernels/launch.hpp"
#include "tpx/kernels/optimizer.hpp"

namespace tpx::cuda {

namespace detail {
template <class G, class M>
__global__ void __launch_bounds__(block_threads)
    adamw_kernel(std::int64_t n, kernels::adamw_update base, const float* step, const float* scale, float* master,
                 const G* grad, float* m, float* v, M* model) {
  const kernels::adamw_update update = base.read(step, scale);
  for (std::int64_t i = global_thread(); i < n; i += grid_stride()) {
    float p = master[i], mi = m[i], vi = v[i];
    update(p, static_cast<float>(grad[i]), mi, vi);
    master[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (model != nullptr) model[i] = static_cast<M>(p);
  }
}
}  // namespace detail

// One AdamW step of n parameters at step *step (device memory; null: update's own bias
// corrections), the gradient scaled by *scale (device memory; null: 1); model (a lower-precision
// copy of master) may be null.
template <class G, class M = bf16>
void adamw_step(cudaStream_t stream, std::int64_t n, const kernels::adamw_update& update, const float* step,
                const float* scale, float* master, const G* grad, float* m, float* v, M* model = nullptr) {
  if (n <= 0) return;
  detail::adamw_kernel<<<grid_for(n), block_threads, 0, stream>>>(n, update, step, scale, master, grad, m, v,
                                                                   model);
  TPX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tpx::cuda

// Where a layout stops being compute bound, found from the cost model's own predictions
// (cost/mlp.hpp), not from a separate formula: the notes' rules of thumb are what these return.
//
//   min_tokens_per_device<fsdp>(sys, shape, bpe)   the per-device batch B/X above which the
//       layer's weight traffic hides behind its math: the notes' C/W (2550 on a TPU v5p axis,
//       2550/n_axes over n_axes axes; 2200 on an H100 NVLink domain). Priced on the backward
//       pass, which every weight-moving layout has (DP's AllReduce lives there); for FSDP the
//       forward pass gives the same bound.
//   max_compute_bound_degree<tp>(sys, shape, bpe)  the largest tensor-parallel degree Y whose
//       forward pass is still compute bound: the notes' Y < n_axes F W / C (about F/2200 on
//       H100), from the forward AllGather of In and ReduceScatter of Out.
// Both compare the notes' T_math (FLOPs / C) with T_comm, leaving the memory roofline aside.
#pragma once

#include "tpx/cost/mlp.hpp"

namespace tpx::cost::mlp {

// Layouts whose communication does not grow with the batch (dp, fsdp): T_math grows linearly,
// so the balance is where T_math(B) = T_comm.
template <class L, class Sys>
constexpr double min_tokens_per_device(const Sys& sys, shape s, double bpe) {
  const op_estimate bwd = predict_layer<L>(sys, s, bpe).backward;
  const double balanced_batch = s.batch * bwd.comm.seconds / bwd.math_seconds;
  return balanced_batch / split_of<type_at_t<0, typename L::in::dims>>(sys.mesh);
}

// The largest Y (mesh axis Y, at most max_degree) at which layout L's forward pass has
// T_math >= T_comm; 1 if none. sys's size of Y is replaced.
template <class L, class Sys>
constexpr int max_compute_bound_degree(Sys sys, shape s, double bpe, int max_degree = 4096) {
  const int x = sys.mesh.template size<X>();
  int best = 1;
  for (int y = 2; y <= max_degree; ++y) {
    sys.mesh = mesh{x, y};
    const op_estimate fwd = predict_layer<L>(sys, s, bpe).forward;
    if (fwd.math_seconds < fwd.comm.seconds) break;
    best = y;
  }
  return best;
}

}  // namespace tpx::cost::mlp

// What a training step of a model family takes on one rank: its tensor memory, the FLOPs of its
// matrix products, what its collectives move over each set of mesh axes and how much of that its
// background tasks move beside its computation (tpx::in_background: what --overlap on can hide),
// and in a dry run the order of it all (the rank's timeline: which work each task can hide behind).
// measure_step_usage sets up the training state as train_rank does (training.hpp: parameters,
// gradients and both AdamW moments, then the network) and runs two steps of train_step, the first
// to reach the steady state (the second step holds what the first made and kept), and measures
// the second.
//
// --dry-run runs it on meta tensors (dry_run_main.hpp), where nothing is computed; the trainer
// tests run it on a real run too and check that both read the same (tests/trainer/
// dry_run_test.cpp and gpt_dry_run_test.cpp).
#pragma once

#include <cstdint>
#include <tpx/spmd/dry_run.hpp>
#include <vector>

#include "text_data.hpp"
#include "train_step.hpp"

namespace trainer {

struct step_usage {
  int rank = 0;
  std::int64_t state_bytes = 0;  // held between steps: the shards of the parameters, their
                                 // gradients, both AdamW moments and what the network keeps
  std::int64_t peak_bytes = 0;   // the most held during the two steps
  double matrix_flops = 0;       // of the second step (counted by meta tensors only)
  std::vector<tpx::axes_traffic> traffic;  // of the second step, by set of mesh axes
                                           // (rank_context::traffic_by_axis_names)
  std::vector<tpx::axes_traffic> background_traffic;  // the part of it background tasks moved,
                                                      // beside the step's computation
  std::vector<tpx::timeline_event> timeline;  // of the second step, in order (a dry run's only)
};

template <class Tc, class Space, class Family, class Rank>
step_usage measure_step_usage(Rank& rank, const run_options<Family>& o, const text_data& data) {
  using Tensors = typename Family::template tensors<Space>;
  Tensors params(rank, o.model), grads(rank, o.model), m(rank, o.model), v(rank, o.model);
  Family::initialize(params, o.model);
  typename Family::template network<Tc, Space> net(rank, o.model);
  step_usage usage;
  usage.rank = rank.world_rank();
  usage.state_bytes = rank.memory().live_bytes();
  rank.memory().reset_peak();
  train_step(rank, net, o, data, 0, params, grads, m, v);
  using tpx::traffic_part;
  const std::vector<tpx::axes_traffic> before = rank.traffic_by_axis_names(),
                                       background_before =
                                           rank.traffic_by_axis_names(traffic_part::background);
  const double flops_before = tpx::dry_run_flops(rank);
  tpx::record_timeline(rank);
  train_step(rank, net, o, data, 1, params, grads, m, v);
  usage.timeline = tpx::take_timeline(rank);
  usage.peak_bytes = rank.memory().peak_bytes();
  usage.matrix_flops = tpx::dry_run_flops(rank) - flops_before;
  usage.traffic = tpx::traffic_since(rank.traffic_by_axis_names(), before);
  usage.background_traffic =
      tpx::traffic_since(rank.traffic_by_axis_names(traffic_part::background), background_before);
  return usage;
}

}  // namespace trainer

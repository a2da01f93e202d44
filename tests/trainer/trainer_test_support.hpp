// Shared by the trainer tests: a small configuration of the example trainer (and of it cut into
// pipeline stages), a helper that runs it and returns the loss of every step, and the worst
// relative difference of two runs' losses.
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../../examples/trainer/host_ranks.hpp"  // training.hpp, its rank loops compiled once

// trainer::run of a model family on a launcher, as an explicit instantiation names it:
// `extern template TPX_TRAINER_RUN(F, L);` in a header, `template TPX_TRAINER_RUN(F, L);` in the
// one file that compiles it.
#define TPX_TRAINER_RUN(Family, Launcher)                                                    \
  void trainer::run<Family, Launcher>(const trainer::run_options<Family>&,                   \
                                      const std::function<void(const trainer::step_report&)>&, \
                                      Launcher, const std::function<void()>&)

// The trainer of tpx-train on the thread backend is compiled once, in trainer_run.cpp (the object
// library tpx_trainer_run), not in every test that runs it: its instantiation is most of such a
// test's compile time, under the sanitizers most of all.
extern template TPX_TRAINER_RUN(trainer::mlp, tpx::host_backend);

namespace trainer_test {

inline trainer::options small(int mesh_x, int mesh_y, int checkpoint_every = 0) {
  trainer::options o;
  o.model.batch = 24;
  o.model.d_model = 20;  // not a multiple of every mesh size: uneven shards on purpose
  o.model.ffn = 36;
  o.model.layers = 4;
  o.model.context = 2;
  o.model.checkpoint_every = checkpoint_every;
  o.mesh_x = mesh_x;
  o.mesh_y = mesh_y;
  o.steps = 50;
  o.lr = 1e-2f;
  return o;
}

// small(1, 1)'s model and training cut into `stages` pipeline stages of mesh_x x mesh_y
// (tpx-train --pipeline), run in `schedule` over 4 microbatches, 20 steps.
inline trainer::run_options<trainer::pipelined_mlp> pipelined(int stages, int mesh_x, int mesh_y,
                                                              const std::string& schedule) {
  const trainer::options whole = small(1, 1);
  trainer::run_options<trainer::pipelined_mlp> o;
  static_cast<trainer::config&>(o.model) = whole.model;
  o.model.stages = stages;
  o.model.microbatches = 4;
  o.model.schedule = schedule;
  o.mesh_x = mesh_x;
  o.mesh_y = mesh_y;
  o.steps = 20;
  o.lr = whole.lr;
  return o;
}

// The largest |got - want| / want over the steps: NaN if any step's is, infinity when the runs
// differ in length.
inline float worst_relative_difference(const std::vector<float>& got,
                                       const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<float>::infinity();
  float worst = 0;
  for (std::size_t s = 0; s < got.size(); ++s) {
    const float d = std::abs(got[s] - want[s]) / want[s];
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

inline std::vector<float> losses(const trainer::options& o) {
  std::vector<float> out;
  trainer::run(o, [&](const trainer::step_report& r) { out.push_back(r.loss); });
  return out;
}

}  // namespace trainer_test

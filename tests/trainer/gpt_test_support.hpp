// Shared by the GPT model's tests (tests/trainer/gpt_test.cpp and gpt_hsdp_test.cpp,
// tests/cuda/trainer_test.cu, tests/mpi/mpi_trainer_test.cpp): a tiny configuration whose heads,
// positions, widths and vocabulary split unevenly on the test meshes, a run of one forward and
// backward pass that returns the loss and every gradient, and 30 steps of the shared trainer on it.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../../examples/gpt/host_ranks.hpp"  // family.hpp, its rank loops compiled once
#include "../../examples/trainer/training.hpp"
#include "trainer_test_support.hpp"  // TPX_TRAINER_RUN

// The GPT trainer on the thread backend is compiled once, in trainer_run.cpp (tpx_trainer_run),
// like tpx-train's (trainer_test_support.hpp).
extern template TPX_TRAINER_RUN(gpt::family, tpx::host_backend);

namespace gpt_test {

inline const char* const text = "/usr/share/common-licenses/GPL-3";

inline gpt::config tiny() {
  gpt::config c;
  c.batch = 4;
  c.seq = 6;
  c.heads = 3;
  c.head_dim = 4;  // D = 12
  c.ffn = 10;
  c.layers = 2;
  c.vocab = 259;  // split unevenly too; the byte tokens use the first 256 rows
  return c;
}

// The loss and every gradient, as global arrays in parameter order, from rank 0 of a mesh
// (gpt::mesh{R, X, Y}).
struct run_result {
  float loss = 0;
  std::vector<std::string> names;
  std::vector<std::vector<float>> grads;
};

template <class Launcher = tpx::host_backend>
run_result gradients(const gpt::mesh& mesh, Launcher launcher = {}, const gpt::config& c = tiny()) {
  const trainer::text_data data(text, static_cast<int>(c.seq));
  run_result out;
  std::mutex m;
  tpx::spmd(launcher, mesh, [&](auto& rank) {
    using Space = tpx::space_of_t<decltype(rank)>;
    gpt::model_tensors params(rank, c), grads(rank, c);
    gpt::initialize(params, c);
    const gpt::model<float, Space> net(rank, c);
    const auto loss = net.forward_backward(params, gpt::load_batch<Space>(rank, data, c, 0), grads);
    run_result r{tpx::scalar_on_host(loss), {}, {}};
    grads.for_each([&](const std::string& name, const auto& g) {
      r.names.push_back(name);
      r.grads.push_back(tpx::to_global(g));
    });
    if (rank.world_rank() == 0) {
      std::lock_guard lock(m);
      out = std::move(r);
    }
  });
  return out;
}

// What differs between two runs beyond the tolerances: the loss beyond loss_tol relative, a
// gradient beyond grad_tol of its largest element, or a gradient that is zero everywhere (a
// parameter the backward pass never reached). One line per finding; empty when they agree.
inline std::vector<std::string> differences(const run_result& got, const run_result& want,
                                            double loss_tol, double grad_tol) {
  std::vector<std::string> found;
  if (!(std::abs(got.loss - want.loss) <= loss_tol * std::abs(want.loss)))
    found.push_back("loss " + std::to_string(got.loss) + " vs " + std::to_string(want.loss));
  if (got.grads.size() != want.grads.size()) {
    found.push_back(std::to_string(got.grads.size()) + " gradients vs " +
                    std::to_string(want.grads.size()));
    return found;
  }
  for (std::size_t t = 0; t < want.grads.size(); ++t) {
    const auto& g = got.grads[t];
    const auto& w = want.grads[t];
    double scale = 0, worst = 0;
    for (float v : w) scale = std::max(scale, double(std::abs(v)));
    for (std::size_t i = 0; i < w.size() && i < g.size(); ++i)
      worst = std::max(worst, double(std::abs(g[i] - w[i])));
    if (g.size() != w.size() || !(worst <= grad_tol * scale) || scale == 0)
      found.push_back(want.names[t] + ": worst difference " + std::to_string(worst) + " of " +
                      std::to_string(scale) + " (" + std::to_string(g.size()) + " elements vs " +
                      std::to_string(w.size()) + ")");
  }
  return found;
}

inline std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// 30 steps of the shared trainer (examples/trainer/training.hpp: AdamW at lr 1e-2, clipping at
// norm 1) on the tiny model, on mesh r x x x y (R, X, Y).
inline trainer::run_options<gpt::family> training(int r, int x, int y, int checkpoint_every = 0) {
  trainer::run_options<gpt::family> o;
  o.model = tiny();
  o.model.checkpoint_every = checkpoint_every;
  o.mesh_r = r;
  o.mesh_x = x;
  o.mesh_y = y;
  o.steps = 30;
  o.lr = 1e-2f;
  o.text = text;
  return o;
}

// The loss of every step of run o (on the thread backend).
inline std::vector<float> losses(const trainer::run_options<gpt::family>& o) {
  std::vector<float> out;
  trainer::run(o, [&](const trainer::step_report& r) { out.push_back(r.loss); });
  return out;
}

// trainer_test's, under the name the GPT tests use.
using trainer_test::worst_relative_difference;

}  // namespace gpt_test

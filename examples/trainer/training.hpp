// The training loop of the example trainer, as a function the command line (train.cpp) and the
// tests (tests/trainer/) both call: run one SPMD program on a mesh, return the loss of every step.
//
// Each rank: initialize (or resume) its shards, then per step load its rows of the batch, run
// forward and backward, clip by the global gradient norm, and apply AdamW to its shards. Rank 0
// reports progress; checkpoints are written by every rank (io/checkpoint.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model.hpp"

namespace trainer {

struct options {
  config model;
  int mesh_x = 2;
  int mesh_y = 2;
  int steps = 300;
  float lr = 3e-3f;
  float weight_decay = 0.0f;
  float clip = 1.0f;
  bool bf16 = false;
  std::string text = "/usr/share/common-licenses/GPL-3";
};

// What rank 0 reports after each step.
struct step_report {
  int step;
  float loss;
  float grad_norm;
  double seconds;             // wall time of the step
  double collective_seconds;  // of which inside collectives (rank 0)
};

template <class Tc, class Rank>
void train_rank(Rank& rank, const options& o, const text_data& data,
                const std::function<void(const step_report&)>& report) {
  model_tensors params(rank, o.model), grads(rank, o.model);
  initialize(params, o.model);
  model_tensors m(rank, o.model), v(rank, o.model);
  model<Tc> net(rank, o.model);
  const tpx::nn::adamw_config adam{o.lr, 0.9f, 0.95f, 1e-8f, o.weight_decay};
  for (int step = 0; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const double comm_start = rank.collective_seconds();
    const batch_tokens tokens = load_batch(rank, data, o.model, step);
    const float loss = net.forward_backward(params, tokens, grads);
    float norm2 = 0;
    grads.for_each([&](const std::string&, const auto& g) { norm2 += tpx::nn::squared_norm(g); });
    const float norm = std::sqrt(norm2);
    const float scale = o.clip > 0 && norm > o.clip ? o.clip / norm : 1.0f;
    params.for_each([&](const std::string&, auto& p, auto& g, auto& pm, auto& pv) {
      tpx::nn::adamw_step(p, g, pm, pv, adam, step + 1, scale);
    }, grads, m, v);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rank.world_rank() == 0)
      report({step, loss, norm, seconds, rank.collective_seconds() - comm_start});
  }
}

// Trains on an o.mesh_x x o.mesh_y mesh of host threads; report(r) is called by rank 0 after
// every step. Errors of any rank come back as tpx::spmd_error naming the rank.
inline void run(const options& o, const std::function<void(const step_report&)>& report) {
  const text_data data(o.text, o.model.context);
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{o.mesh_x, o.mesh_y}, [&](auto& rank) {
    if (o.bf16)
      train_rank<tpx::bf16>(rank, o, data, report);
    else
      train_rank<float>(rank, o, data, report);
  });
}

}  // namespace trainer

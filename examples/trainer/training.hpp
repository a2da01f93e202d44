// The training loop of the example trainer, as a function the command line (train.cpp) and the
// tests (tests/trainer/) both call: run one SPMD program on a mesh, return the loss of every step.
//
// Each rank: initialize (or resume) its shards, then per step load its rows of the batch, run
// forward and backward, clip by the global gradient norm, and apply AdamW to its shards
// (train_step). The step runs in the rank's memory space from end to end: the batch is copied in,
// and nothing comes back unless the step reports, every --report-every steps, when the loss and
// gradient norm (two scalars) are read back and rank 0 reports progress. Checkpoints
// (io/checkpoint.hpp) hold every rank's shards of the parameters and Adam moments; --resume loads
// the newest valid one onto whatever mesh this run has, and since a batch is a function of the
// step number, the step is the whole data position. The checkpoint folder is created, locked and
// tidied before any training work, so that an unusable or busy folder fails at once. The launcher
// is a parameter: tpx::host (a thread per rank) for tpx-train, tpx::cuda_simulated (a thread and a
// stream per rank on one GPU) for tpx-train-cuda; the tensors follow the rank's memory space.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tpx/io/checkpoint.hpp>
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
  std::string ckpt_dir;  // where checkpoints go; empty: none
  int save_every = 0;    // also save every N steps (the last step is always saved)
  bool resume = false;   // continue from ckpt_dir's newest valid checkpoint, on any mesh
  int keep = 3;          // checkpoints kept in ckpt_dir, the newest; 0: all
  int report_every = 1;  // read the loss back and report every N steps (and the last)
};

// What rank 0 reports after every report_every-th step.
struct step_report {
  int step;
  float loss;
  float grad_norm;
  double seconds;             // wall time per step since the last report
  double collective_seconds;  // of which inside collectives (rank 0), per step
};

// The checkpoint of the training state after `step` steps: every rank's shards of the
// parameters and of both Adam moments, and the run's settings.
template <class Rank, class Space>
void save_checkpoint(const Rank& rank, const tpx::io::checkpoint_directory& dir, const options& o,
                     int step, const model_tensors<Space>& params, const model_tensors<Space>& m,
                     const model_tensors<Space>& v) {
  tpx::io::checkpoint_writer out(rank, dir, step);
  params.for_each(
      [&](const std::string& name, const auto& p, const auto& pm, const auto& pv) {
        out.add("param." + name, p);
        out.add("adam.m." + name, pm);
        out.add("adam.v." + name, pv);
      },
      m, v);
  out.save({{"data_position", step},  // batches are a function of the step (text_data.hpp)
            {"mesh", std::to_string(o.mesh_x) + "x" + std::to_string(o.mesh_y)},
            {"batch", o.model.batch},
            {"d_model", o.model.d_model},
            {"ffn", o.model.ffn},
            {"layers", o.model.layers},
            {"context", o.model.context},
            {"seed", o.model.seed},
            {"lr", o.lr},
            {"bf16", o.bf16}});
}

// The step to resume from: that of the checkpoint in, whose data position must be that step
// (batches are a function of the step) and a step this trainer counts to.
inline int resume_step(const tpx::io::checkpoint_reader& in, const std::string& dir) {
  const std::int64_t position = in.state().at("data_position").get<std::int64_t>();
  if (position < 0 || position != in.step() || position > std::numeric_limits<int>::max())
    throw std::runtime_error("trainer: --resume: the checkpoint of step " +
                             std::to_string(in.step()) + " in " + dir + " has data_position " +
                             std::to_string(position) + ", not its step (between 0 and " +
                             std::to_string(std::numeric_limits<int>::max()) + ")");
  return static_cast<int>(position);
}

// Loads the checkpoint of `step` in o.ckpt_dir into this rank's shards.
template <class Space>
void load_checkpoint(const options& o, int step, model_tensors<Space>& params,
                     model_tensors<Space>& m, model_tensors<Space>& v) {
  tpx::io::checkpoint_reader in(o.ckpt_dir, step);
  for (const char* key : {"batch", "d_model", "ffn", "layers", "context", "seed"}) {
    const std::int64_t saved = in.state().at(key).get<std::int64_t>();
    const std::int64_t now =
        nlohmann::json{{"batch", o.model.batch},     {"d_model", o.model.d_model},
                       {"ffn", o.model.ffn},         {"layers", o.model.layers},
                       {"context", o.model.context}, {"seed", o.model.seed}}
            .at(key)
            .get<std::int64_t>();
    if (saved != now)
      throw std::runtime_error("trainer: --resume: the checkpoint in " + o.ckpt_dir + " has " +
                               key + " = " + std::to_string(saved) + ", this run " +
                               std::to_string(now));
  }
  params.for_each(
      [&](const std::string& name, auto& p, auto& pm, auto& pv) {
        in.load("param." + name, p);
        in.load("adam.m." + name, pm);
        in.load("adam.v." + name, pv);
      },
      m, v);
}

// The loss and squared gradient norm of one step, scalars in the step's memory space.
template <class Space>
struct step_result {
  tpx::BasicTensor<Space, float> loss;
  tpx::BasicTensor<Space, float> grad_norm2;
};

// One training step (step counts from 0): forward, backward, clipping by the global gradient
// norm, AdamW. Everything runs in Space; the only copy is the batch's, in load_batch.
template <class Tc, class Space>
step_result<Space> train_step(const tpx::rank_context& rank, model<Tc, Space>& net,
                              const options& o, const text_data& data, int step,
                              model_tensors<Space>& params, model_tensors<Space>& grads,
                              model_tensors<Space>& m, model_tensors<Space>& v) {
  const auto tokens = load_batch<Space>(rank, data, o.model, step);
  auto loss = net.forward_backward(params, tokens, grads);
  std::optional<tpx::BasicTensor<Space, float>> norm2;
  grads.for_each([&](const std::string&, const auto& g) {
    auto n = tpx::nn::squared_norm(g);
    norm2 = norm2 ? tpx::add(*norm2, n) : std::move(n);
  });
  const auto scale = tpx::nn::clip_factor(*norm2, o.clip);
  const tpx::nn::adamw_config adam{o.lr, 0.9f, 0.95f, 1e-8f, o.weight_decay};
  params.for_each([&](const std::string&, auto& p, auto& g, auto& pm,
                      auto& pv) { tpx::nn::adamw_step(p, g, pm, pv, adam, step + 1, scale); },
                  grads, m, v);
  return {std::move(loss), std::move(*norm2)};
}

// Where a run's checkpoints go (none without --ckpt-dir) and the step it resumes from. Made
// before any training work: creates, locks and tidies o.ckpt_dir and, for --resume, finds the
// newest valid checkpoint in it (warning on stderr about each damaged one skipped) and continues
// its run.
struct checkpointing {
  explicit checkpointing(const options& o) {
    if (o.ckpt_dir.empty()) return;
    dir.emplace(o.ckpt_dir, tpx::io::checkpoint_directory_options{.keep = o.keep});
    if (!o.resume) return;
    const auto in = tpx::io::checkpoint_reader::open_newest_valid(o.ckpt_dir, std::cerr);
    first_step = resume_step(in, o.ckpt_dir);
    dir->continue_run(in.run_id());
  }
  std::optional<tpx::io::checkpoint_directory> dir;
  int first_step = 0;
};

template <class Tc, class Rank>
void train_rank(Rank& rank, const options& o, const checkpointing& ckpt, const text_data& data,
                const std::function<void(const step_report&)>& report) {
  model_tensors params(rank, o.model), grads(rank, o.model), m(rank, o.model), v(rank, o.model);
  initialize(params, o.model);
  const int first = ckpt.first_step;
  if (o.resume) load_checkpoint(o, first, params, m, v);
  model<Tc, tpx::space_of_t<Rank>> net(rank, o.model);
  auto since = std::chrono::steady_clock::now();
  double comm_since = rank.collective_seconds();
  int last_report = first - 1;
  for (int step = first; step < o.steps; ++step) {
    const auto result = train_step(rank, net, o, data, step, params, grads, m, v);
    const bool last = step + 1 == o.steps;
    if (last || (step + 1 - first) % o.report_every == 0) {
      // The step's one wait for the device: two scalars, read where they are reported.
      const float loss = tpx::scalar_on_host(result.loss);
      const float norm = std::sqrt(tpx::scalar_on_host(result.grad_norm2));
      const auto now = std::chrono::steady_clock::now();
      const double steps = step - last_report;
      if (rank.world_rank() == 0)
        report({step, loss, norm, std::chrono::duration<double>(now - since).count() / steps,
                (rank.collective_seconds() - comm_since) / steps});
      since = now;
      comm_since = rank.collective_seconds();
      last_report = step;
    }
    if (ckpt.dir && (last || (o.save_every > 0 && (step + 1) % o.save_every == 0)))
      save_checkpoint(rank, *ckpt.dir, o, step + 1, params, m, v);
  }
}

// Trains on an o.mesh_x x o.mesh_y mesh of the launcher's ranks (tpx::host by default);
// report(r) is called by rank 0 after every step. Errors of any rank come back as
// tpx::spmd_error naming the rank.
template <class Launcher = tpx::host_backend>
void run(const options& o, const std::function<void(const step_report&)>& report,
         Launcher launcher = {}) {
  const checkpointing ckpt(o);
  const text_data data(o.text, o.model.context);
  tpx::spmd(launcher, tpx::Mesh<X, Y>{o.mesh_x, o.mesh_y}, [&](auto& rank) {
    if (o.bf16)
      train_rank<tpx::bf16>(rank, o, ckpt, data, report);
    else
      train_rank<float>(rank, o, ckpt, data, report);
  });
}

}  // namespace trainer

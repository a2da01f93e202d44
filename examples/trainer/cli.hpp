// The command line of the example trainers, shared by tpx-train (train.cpp, host threads),
// tpx-train-cuda (train_cuda.cu, ranks on one GPU) and tpx-gpt (examples/gpt): the same flags,
// progress lines and JSON log whatever model family (training.hpp) and launcher. See README.md
// beside it.
//
// train_main<Family> parses the flags (CLI11; the family adds its size flags), runs training.hpp's
// SPMD program with the launcher it is given, prints a progress line every --log-every steps and
// writes one JSON object per reported step (--report-every, default every step) to --log, which
// scripts/plot-loss.sh turns into a loss curve. Model FLOPs utilization (MFU) is measured against
// --peak-gflops, or when that is 0 against the GEMM rate every rank reaches at once, measured
// before training (peak.hpp).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli_checks.hpp"
#include "peak.hpp"
#include "training.hpp"

namespace trainer {

// "2x2" -> {1, 2, 2} (R, X, Y); where `replicas` allows a replica axis, also "2x2x2" -> {2, 2, 2}.
inline std::tuple<int, int, int> parse_mesh(const std::string& text, bool replicas = false) {
  std::vector<int> sizes;
  try {
    long long product = 1;
    for (std::size_t begin = 0; begin <= text.size();) {
      const std::size_t end = std::min(text.find('x', begin), text.size());
      const std::string part = text.substr(begin, end - begin);
      std::size_t used = 0;
      const int n = std::stoi(part, &used);
      if (used != part.size() || n < 1 || n > INT_MAX / product) throw std::invalid_argument(text);
      product *= n;
      sizes.push_back(n);
      begin = end + 1;
    }
    if (sizes.size() == 2) return {1, sizes[0], sizes[1]};
    if (replicas && sizes.size() == 3) return {sizes[0], sizes[1], sizes[2]};
    throw std::invalid_argument(text);
  } catch (const std::exception&) {
    throw CLI::ValidationError(
        "--mesh", std::string(replicas ? "expected XxY or RxXxY" : "expected XxY") +
                      " with positive sizes whose product is at most " + std::to_string(INT_MAX) +
                      ", e.g. " + (replicas ? "2x2 or 2x2x2" : "2x2") + "; got '" + text + "'");
  }
}

// The √L policy of activation checkpointing (seed 000): keep every C-th of L block inputs with
// C = sqrt(L) rounded (at least 1), so that the kept inputs (L / C) and one segment's states (C)
// together hold about 2 sqrt(L) blocks' activations instead of L.
inline int sqrt_policy(int layers) {
  return std::max(1, static_cast<int>(std::lround(std::sqrt(static_cast<double>(layers)))));
}

// A launcher the command line offers as --backend NAME.
template <class Launcher>
struct backend {
  const char* name;
  Launcher launcher;
};
template <class Launcher>
backend(const char*, Launcher) -> backend<Launcher>;  // clang 14 does not deduce aggregates

// The command line: parses the flags, trains Family's model with the launcher --backend names
// (the first of `backends` by default: tpx::host for tpx-train and tpx-gpt; tpx::cuda_simulated
// or tpx::cuda_devices for tpx-train-cuda), prints progress; returns the process's exit code.
// `program` and `about` head --help.
template <class Family, class... Launchers>
int train_main(int argc, char** argv, const char* program, const std::string& about,
               backend<Launchers>... backends) {
  run_options<Family> o;
  std::string mesh = "2x2", log_path;
  std::string backend_name = std::get<0>(std::tie(backends...)).name;
  int log_every = 10;
  double peak_gflops = 0;
  double timeout_seconds = 300;
  constexpr bool replicas = has_replica_axis<Family>;
  CLI::App app{std::string(program) + ": " + Family::about +
               " trained with FSDP over mesh axis X and tensor parallelism over Y" +
               (replicas ? " (optionally replicated over R: HSDP), " : ", ") + about};
  app.add_option("--mesh", mesh,
                 replicas ? "mesh shape XxY or RxXxY (R: replicas, each a whole FSDP x TP mesh "
                            "that trains on its part of the batch, gradients summed over R: "
                            "HSDP; X: FSDP/data axis; Y: tensor-parallel axis)"
                          : "mesh shape XxY (X: FSDP/data axis, Y: tensor-parallel axis)")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "training steps")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--batch", o.model.batch, "global batch (sequences)")
      ->capture_default_str()
      ->check(whole_number<std::int64_t>(1));
  for (const size_flag& f : Family::size_flags(o.model))
    std::visit(
        [&](auto* field) {
          using T = std::remove_pointer_t<decltype(field)>;
          app.add_option(f.name, *field, f.help)
              ->capture_default_str()
              ->check(whole_number<T>(static_cast<T>(f.least)));
        },
        f.field);
  if constexpr (requires { Family::switch_flags(o.model); })
    for (const switch_flag& f : Family::switch_flags(o.model)) app.add_flag(f.name, *f.field, f.help);
  app.add_option("--lr", o.lr, "AdamW learning rate")
      ->capture_default_str()
      ->check(finite_number(0, bound::open));
  app.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str()
      ->check(finite_number(0, bound::closed));
  app.add_option("--clip", o.clip, "clip the global gradient norm to this (0: off)")
      ->capture_default_str()
      ->check(finite_number(0, bound::closed));
  app.add_option("--seed", o.model.seed, "seed of the weights and of the batches")
      ->capture_default_str()
      ->check(whole_number<std::uint64_t>(0));
  app.add_flag("--bf16", o.bf16,
               "compute (and communicate) in bf16; masters and moments stay fp32");
  std::string checkpoint_every = "0";
  app.add_option("--checkpoint-every", checkpoint_every,
                 "activation checkpointing: keep every C-th block input, recompute the rest (0: "
                 "keep everything; sqrt: C = sqrt(layers) rounded, the least memory for one "
                 "extra forward pass)")
      ->capture_default_str()
      ->check(whole_number_or(0, {"sqrt"}));
  app.add_option("--ckpt-dir", o.ckpt_dir, "write sharded checkpoints (safetensors) here");
  app.add_option("--save-every", o.save_every, "save every N steps (the last step always)")
      ->capture_default_str()
      ->check(whole_number(0));
  app.add_flag("--resume", o.resume,
               "continue from --ckpt-dir's newest valid checkpoint, on any mesh")
      ->needs("--ckpt-dir");
  app.add_option("--keep", o.keep,
                 "keep the newest K checkpoints in --ckpt-dir, delete older ones (0: keep all)")
      ->capture_default_str()
      ->check(whole_number(0));
  app.add_option("--text", o.text, "training text")
      ->capture_default_str()
      ->check(CLI::ExistingFile);
  app.add_option("--log", log_path, "write one JSON object per step to this file (JSONL)");
  app.add_option("--log-every", log_every, "print a progress line every N steps")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--report-every", o.report_every,
                 "read the loss back every N steps (on a GPU the steps between run without "
                 "waiting for the host); --log gets one line per report")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--peak-gflops", peak_gflops,
                 "the peak the MFU column divides by, in GFLOP/s for all ranks together (0: "
                 "measure every rank's GEMM rate at once before training)")
      ->capture_default_str()
      ->check(finite_number(0, bound::closed));
  app.add_option("--timeout", timeout_seconds,
                 "seconds a rank waits in a collective for the others before the run fails, "
                 "naming the ranks that never came")
      ->capture_default_str()
      ->check(finite_number(0, bound::open));
  if (sizeof...(Launchers) > 1)
    app.add_option("--backend", backend_name, "how the ranks run")
        ->capture_default_str()
        ->check(CLI::IsMember({std::string(backends.name)...}));
  CLI11_PARSE(app, argc, argv);

  try {
    std::tie(o.mesh_r, o.mesh_x, o.mesh_y) = parse_mesh(mesh, replicas);
    o.model.checkpoint_every = checkpoint_every == "sqrt" ? sqrt_policy(o.model.layers)
                                                          : std::stoi(checkpoint_every);
    o.timeout = std::chrono::milliseconds(
        static_cast<std::int64_t>(std::min(timeout_seconds, 1e9) * 1e3 + 0.5));
    std::unique_ptr<std::ofstream> log;
    if (!log_path.empty()) {
      std::error_code same_error;
      if (std::filesystem::equivalent(log_path, o.text, same_error))
        throw std::runtime_error("--log " + log_path + " is the training text (--text " + o.text +
                                 "); writing the log would overwrite it");
      log = std::make_unique<std::ofstream>(log_path);
      if (!*log) throw std::runtime_error("cannot write the log " + log_path);
    }
    const std::string replica_axis =
        o.mesh_r > 1 ? "R=" + std::to_string(o.mesh_r) + " replicas, " : "";
    const std::string checkpointing =
        o.model.checkpoint_every > 0
            ? ", activation checkpointing every " + std::to_string(o.model.checkpoint_every) +
                  " block(s)"
            : "";
    std::printf("%s: mesh %s (%sX=%d FSDP, Y=%d TP), %d steps, %s, %s%s\n", program,
                mesh_text(o).c_str(), replica_axis.c_str(), o.mesh_x, o.mesh_y, o.steps,
                Family::describe(o.model).c_str(), o.bf16 ? "bf16" : "fp32",
                checkpointing.c_str());
    const double flops = Family::flops_per_step(o.model);
    const double tokens = Family::tokens_per_step(o.model);
    double peak = peak_gflops * 1e9;
    const auto measure_peak = [&](auto launcher) {
      return [&, launcher] {
        if (peak == 0) peak = measured_peak_flops(launcher, mesh_of(o).rank_count(), o.bf16);
        std::printf("MFU against %.1f GFLOP/s (%s)\n", peak * 1e-9,
                    peak_gflops > 0 ? "--peak-gflops" : "measured: every rank's GEMM at once");
        std::fflush(stdout);
      };
    };
    const auto report = [&](const step_report& r) {
      const double tokens_per_s = tokens / r.seconds;
      const double gflops = flops / r.seconds * 1e-9;
      const double mfu = flops / r.seconds / peak;
      const double comm = r.collective_seconds / r.seconds;
      if (r.step % log_every < o.report_every || r.step + 1 == o.steps) {
        std::printf(
            "step %5d | loss %.4f | grad norm %.3f | %8.0f tokens/s | %7.2f GFLOP/s | MFU "
            "%5.1f%% | collectives %3.0f%% | peak mem %.1f MiB\n",
            r.step, r.loss, r.grad_norm, tokens_per_s, gflops, 100 * mfu, 100 * comm,
            static_cast<double>(r.peak_bytes) / (1 << 20));
        std::fflush(stdout);  // progress shows at once through a pipe or a file too
      }
      if (log)
        *log << "{\"step\": " << r.step << ", \"loss\": " << r.loss
             << ", \"grad_norm\": " << r.grad_norm << ", \"seconds\": " << r.seconds
             << ", \"tokens_per_s\": " << tokens_per_s << ", \"gflops\": " << gflops
             << ", \"mfu\": " << mfu << ", \"collective_share\": " << comm
             << ", \"peak_bytes\": " << r.peak_bytes << "}\n"
             << std::flush;  // whole lines, for whoever tails the log
    };
    ((backend_name == backends.name
          ? run(o, report, backends.launcher, measure_peak(backends.launcher))
          : void()),
     ...);
    if (log)
      std::printf("log: %s (plot: scripts/plot-loss.sh %s loss.png)\n", log_path.c_str(),
                  log_path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
  return 0;
}

}  // namespace trainer

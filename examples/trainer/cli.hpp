// The command line of the example trainers, shared by tpx-train (train.cpp, host threads),
// tpx-train-cuda (train_cuda.cu, ranks on one GPU) and tpx-gpt (examples/gpt): the same flags,
// progress lines and JSON log whatever model family (training.hpp) and launcher. See README.md
// beside it.
//
// train_main<Family> parses the flags (command_line.hpp: CLI11, compiled in a file of its own;
// the family adds its size flags), runs training.hpp's SPMD program with the launcher it is
// given, prints a progress line every --log-every steps and writes one JSON object per reported
// step (--report-every, default every step) to --log, which scripts/plot-loss.sh turns into a
// loss curve (with --profile-phases, the last line also holds the phase table's figures:
// phase_table.hpp). Model FLOPs utilization (MFU) is measured against --peak-gflops, or when that
// is 0 against the GEMM rate every rank reaches at once, measured before training (peak.hpp).
#pragma once

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "command_line.hpp"
#include "dry_run.hpp"
#include "model_family.hpp"
#include "peak.hpp"
#include "phase_table.hpp"
#include "run_description.hpp"
#include "training.hpp"

namespace trainer {

// A launcher the command line offers as --backend NAME.
template <class Launcher>
struct backend {
  const char* name;
  Launcher launcher;
};
template <class Launcher>
backend(const char*, Launcher) -> backend<Launcher>;  // clang 14 does not deduce aggregates

// A launcher of ranks on GPUs: its options name a device (tpx::cuda::launch_options), which the
// host's do not.
template <class Launcher>
concept gpu_launcher = requires(typename Launcher::options o) { o.device; };

// The progress output's line of rank 0's link bytes per step (step_report), once a run, for the
// sets of axes that carry any: "rank 0's collectives put on its link per step: X 357.0 KiB,
// Y 652.8 KiB (...)"; none on a mesh of one rank.
inline void print_link_bytes(const step_report& r) {
  std::string moved;
  for (const auto& [axes, bytes] : r.link_bytes_per_step)
    if (bytes > 0) moved += (moved.empty() ? "" : ", ") + axes + " " + bytes_text(bytes);
  if (!moved.empty())
    std::printf("rank 0's collectives put on its link per step: %s (nccl-tests' bus bytes; "
                "--dry-run lists them by collective)\n",
                moved.c_str());
}

// The log's field of rank 0's link bytes per step by set of mesh axes (step_report), with its
// leading comma: `, "link_bytes_per_step": {"X": 72089600, "Y": 1043333120}`; none when the
// steps replayed a recording, whose collectives went uncounted.
inline std::string link_bytes_log_field(const step_report& r) {
  if (r.replayed) return "";
  nlohmann::ordered_json moved = nlohmann::ordered_json::object();
  for (const auto& [axes, bytes] : r.link_bytes_per_step) moved[axes] = bytes;
  return ", \"link_bytes_per_step\": " + moved.dump();
}

// Answers a command line that trains nothing: prints its --help or the parser's refusal, or runs
// its --dry-run or --generate; returns the process's exit code, or nothing when the command line
// asks to train.
template <class Family>
std::optional<int> answer_without_training(const parsed_command_line<Family>& parsed,
                                           const char* program) {
  if (!parsed.options) {
    std::cout << parsed.out;
    std::cerr << parsed.error << std::flush;
    return parsed.status;
  }
  if (parsed.options->dry_run) return dry_run_main<Family>(program, *parsed.options);
  if constexpr (writes_text<Family>)
    if (parsed.options->generate.bytes > 0) return Family::generate_main(program, *parsed.options);
  return std::nullopt;
}

// The command line: parses the flags, trains Family's model with the launcher --backend names
// (the first of `backends` by default: tpx::host for tpx-train and tpx-gpt; tpx::cuda_simulated
// or tpx::cuda_devices for tpx-train-cuda), prints progress; returns the process's exit code.
// `program` and `about` head --help.
template <class Family, class... Launchers>
int train_main(int argc, char** argv, const char* program, const std::string& about,
               backend<Launchers>... backends) {
  constexpr bool on_gpu = (gpu_launcher<Launchers> || ...);
  const parsed_command_line<Family> parsed = parse_command_line<Family>(
      argc, argv, program, about, {std::string(backends.name)...}, on_gpu);
  if (const std::optional<int> answered = answer_without_training(parsed, program)) return *answered;
  const run_options<Family>& o = parsed.options->training;
  const std::string& log_path = parsed.options->log_path;
  const int log_every = parsed.options->log_every;
  const double peak_gflops = parsed.options->peak_gflops;
  try {
    std::unique_ptr<std::ofstream> log;
    if (!log_path.empty()) log = std::make_unique<std::ofstream>(open_log(log_path, o.text));
    std::printf("%s: %s, %d steps, %s\n", program, layout_text(o).c_str(), o.steps,
                model_text(o).c_str());
    if (const std::string idle = idle_ranks_text(o); !idle.empty())
      std::printf("%s: note: %s\n", program, idle.c_str());
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
    bool traffic_printed = false;
    const auto report = [&](const step_report& r) {
      const double tokens_per_s = tokens / r.seconds;
      const double gflops = flops / r.seconds * 1e-9;
      const double mfu = flops / r.seconds / peak;
      const double comm = r.collective_seconds / r.seconds;
      const double exposed = r.exposed_collective_seconds / r.seconds;
      if (r.step % log_every < o.report_every || r.step + 1 == o.steps) {
        std::printf(
            "step %5d | loss %.4f | grad norm %.3f | %8.0f tokens/s | %7.2f GFLOP/s | MFU "
            "%5.1f%% | collectives %3.0f%%, exposed %3.0f%% | peak mem %.1f MiB\n",
            r.step, r.loss, r.grad_norm, tokens_per_s, gflops, 100 * mfu, 100 * comm,
            100 * exposed, static_cast<double>(r.peak_bytes) / (1 << 20));
        if (!traffic_printed && !r.replayed) traffic_printed = (print_link_bytes(r), true);
        std::fflush(stdout);  // progress shows at once through a pipe or a file too
      }
      if (log)
        *log << "{\"step\": " << r.step << ", \"loss\": " << r.loss
             << ", \"grad_norm\": " << r.grad_norm << ", \"seconds\": " << r.seconds
             << ", \"tokens_per_s\": " << tokens_per_s << ", \"gflops\": " << gflops
             << ", \"mfu\": " << mfu << ", \"collective_share\": " << comm
             << ", \"exposed_collective_share\": " << exposed
             << ", \"peak_bytes\": " << r.peak_bytes << link_bytes_log_field(r)
             << phase_log_fields(r) << "}\n"
             << std::flush;  // whole lines, for whoever tails the log
      print_phase_table(stdout, r);
    };
    ((parsed.options->backend == backends.name
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

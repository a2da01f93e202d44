// What a run of the example trainers says of itself and where it writes: the layout and model
// texts of the first line that training (cli.hpp) and --dry-run (dry_run_main.hpp) print, the
// sizes in bytes both report, and the --log file both write, which must never be the training
// text.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

#include "training.hpp"

namespace trainer {

// "96 B", "724.5 KiB", "2.6 MiB", "9.29 GiB"
inline std::string bytes_text(double bytes) {
  char text[32];
  if (bytes < (1 << 10))
    std::snprintf(text, sizeof text, "%.0f B", bytes);
  else if (bytes < (1 << 20))
    std::snprintf(text, sizeof text, "%.1f KiB", bytes / (1 << 10));
  else if (bytes < (1 << 30))
    std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1 << 20));
  else
    std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1 << 30));
  return text;
}

// "mesh 2x2x2 (R=2 replicas, X=2 FSDP, Y=2 TP)", "mesh 2x2 (P=4 pipeline stages, X=2 FSDP, ...)"
template <class Family>
std::string layout_text(const run_options<Family>& o) {
  std::string first = o.mesh_r > 1 ? "R=" + std::to_string(o.mesh_r) + " replicas, " : "";
  if constexpr (is_pipelined<Family>)
    first = "P=" + std::to_string(o.model.stages) + " pipeline stages, ";
  return "mesh " + mesh_text(o) + " (" + first + "X=" + std::to_string(o.mesh_x) +
         " FSDP, Y=" + std::to_string(o.mesh_y) + " TP)";
}

// "batch 16, T=32, ..., bf16, activation checkpointing every 2 block(s)"
template <class Family>
std::string model_text(const run_options<Family>& o) {
  std::string text = Family::describe(o.model) + (o.bf16 ? ", bf16" : ", fp32");
  if (o.model.checkpoint_every > 0)
    text += ", activation checkpointing every " + std::to_string(o.model.checkpoint_every) + " block(s)";
  return text;
}

// The ranks of o's mesh that its model leaves without work, in a sentence for the lines a run
// and a dry run start with (optional: Family::idle_ranks(config, r, x, y)); empty when every
// rank has its share.
template <class Family>
std::string idle_ranks_text(const run_options<Family>& o) {
  if constexpr (requires { Family::idle_ranks(o.model, 1, 1, 1); })
    return Family::idle_ranks(o.model, o.mesh_r, o.mesh_x, o.mesh_y);
  else
    return {};
}

// The --log file, opened for writing; refused when it is the training text, which writing it
// would overwrite (any spelling of the path), or when it cannot be written.
inline std::ofstream open_log(const std::string& log_path, const std::string& text) {
  std::error_code same_error;
  if (std::filesystem::equivalent(log_path, text, same_error))
    throw std::runtime_error("--log " + log_path + " is the training text (--text " + text +
                             "); writing the log would overwrite it");
  std::ofstream log(log_path);
  if (!log) throw std::runtime_error("cannot write the log " + log_path);
  return log;
}

}  // namespace trainer

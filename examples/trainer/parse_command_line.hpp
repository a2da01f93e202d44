// The definition of the example trainers' parse_command_line<Family> (declared, and what it
// returns described, in command_line.hpp): it declares the flags (CLI11; the family adds its size
// flags and switches, model_family.hpp), checks each value (cli_checks.hpp), and turns --mesh
// and --timeout into the run's numbers. Included only by the files that compile a family's
// parser (trainer/command_line.cpp, gpt/command_line.cpp) and by the tests that drive the parser
// directly (tests/trainer/cli_test.cpp, tests/fuzz/trainer_cli_fuzz.cpp), so that CLI11 is parsed
// and compiled there and nowhere else.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cli_checks.hpp"
#include "command_line.hpp"
#include "model_family.hpp"

namespace trainer {

// "2x2" -> {1, 2, 2} (R, X, Y); where `replicas` allows a replica axis, also "2x2x2" -> {2, 2, 2}.
inline std::tuple<int, int, int> parse_mesh(const std::string& text, bool replicas = false) {
  std::vector<int> sizes;
  try {
    long long product = 1;
    for (std::size_t begin = 0; begin <= text.size();) {
      const std::size_t end = std::min(text.find('x', begin), text.size());
      const std::string part = text.substr(begin, end - begin);
      if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos)
        throw std::invalid_argument(text);  // stoi would take " 2" and "+2"
      const int n = std::stoi(part);
      if (n < 1 || n > INT_MAX / product) throw std::invalid_argument(text);
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

template <class Family>
parsed_command_line<Family> parse_command_line(int argc, const char* const* argv,
                                               const char* program, const std::string& about,
                                               const std::vector<std::string>& backends,
                                               bool on_gpu) {
  parsed_command_line<Family> result;
  command_line<Family> c;
  c.backend = backends.front();
  run_options<Family>& o = c.training;
  std::string mesh = "2x2";
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
      ->transform(whole_number(1));
  app.add_option("--batch", o.model.batch, "global batch (sequences)")
      ->capture_default_str()
      ->transform(whole_number<std::int64_t>(1));
  for (const size_flag& f : Family::size_flags(o.model))
    std::visit(
        [&](auto* field) {
          using T = std::remove_pointer_t<decltype(field)>;
          app.add_option(f.name, *field, f.help)
              ->capture_default_str()
              ->transform(whole_number<T>(static_cast<T>(f.least)));
        },
        f.field);
  if constexpr (requires { Family::switch_flags(o.model); })
    for (const switch_flag& f : Family::switch_flags(o.model))
      app.add_flag(f.name, *f.field, f.help);
  if constexpr (requires { Family::choice_flags(o.model); })
    for (const choice_flag& f : Family::choice_flags(o.model))
      app.add_option(f.name, *f.field, f.help)
          ->capture_default_str()
          ->check(CLI::IsMember(f.choices));
  if constexpr (requires { Family::help_footer; }) app.footer(Family::help_footer);
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
      ->transform(whole_number<std::uint64_t>(0));
  app.add_flag("--bf16", o.bf16,
               "compute (and communicate) in bf16; masters and moments stay fp32");
  std::string overlap;
  if constexpr (with_overlap<typename Family::config>) {
    overlap = o.model.overlap ? "on" : "off";
    app.add_option("--overlap", overlap, Family::overlap_help)
        ->capture_default_str()
        ->check(CLI::IsMember({"on", "off"}));
  }
  std::string checkpoint_every = "0";
  app.add_option("--checkpoint-every", checkpoint_every,
                 "activation checkpointing: keep every C-th block input, recompute the rest (0: "
                 "keep everything; sqrt: C = sqrt(layers) rounded, the least memory for one "
                 "extra forward pass)")
      ->capture_default_str()
      ->transform(whole_number_or(0, {"sqrt"}));
  app.add_option("--ckpt-dir", o.ckpt_dir, "write sharded checkpoints (safetensors) here")
      ->check(path("a folder"));
  app.add_option("--save-every", o.save_every, "save every N steps (the last step always)")
      ->capture_default_str()
      ->transform(whole_number(0));
  app.add_flag("--resume", o.resume,
               "continue from --ckpt-dir's newest valid checkpoint, on any mesh")
      ->needs("--ckpt-dir");
  app.add_option("--keep", o.keep,
                 "keep the newest K checkpoints in --ckpt-dir, delete older ones (0: keep all)")
      ->capture_default_str()
      ->transform(whole_number(0));
  app.add_option("--text", o.text, "training text")
      ->capture_default_str()
      ->check(CLI::ExistingFile);
  app.add_option("--log", c.log_path, "write one JSON object per step to this file (JSONL)")
      ->check(path("a file"));
  app.add_option("--log-every", c.log_every, "print a progress line every N steps")
      ->capture_default_str()
      ->transform(whole_number(1));
  app.add_option("--report-every", o.report_every,
                 "read the loss back every N steps (on a GPU the steps between run without "
                 "waiting for the host); --log gets one line per report")
      ->capture_default_str()
      ->transform(whole_number(1));
  if (on_gpu)
    app.add_flag("--cuda-graph", o.cuda_graph,
                 "record the training step once as a CUDA graph and replay it (one launch per "
                 "step instead of hundreds: for small, launch-bound steps); a mesh of one rank");
  app.add_flag("--profile-phases", o.profile_phases,
               "time rank 0's step phase by phase (batch, the model's layers, gradient norm, "
               "AdamW; on a GPU with events on its stream) and print the table after the last "
               "step, over the steps after the first");
  app.add_option("--peak-gflops", c.peak_gflops,
                 "the peak the MFU column divides by, in GFLOP/s for all ranks together (0: "
                 "measure every rank's GEMM rate at once before training)")
      ->capture_default_str()
      ->check(finite_number(0, bound::closed));
  app.add_option("--timeout", timeout_seconds,
                 "seconds a rank waits in a collective for the others before the run fails, "
                 "naming the collective (and, with threads, the ranks that never came)")
      ->capture_default_str()
      ->check(finite_number(0, bound::open));
  if constexpr (writes_text<Family>) {
    generation_request& g = c.generate;
    CLI::Option* generate =
        app.add_option("--generate", g.bytes,
                       "train nothing: print N bytes that the model of --ckpt-dir's newest valid "
                       "checkpoint writes after --prompt, each drawn from its prediction given "
                       "the bytes before it (one host rank, fp32; the model's sizes are the "
                       "checkpoint's, so no model or training flag goes with it)")
            ->transform(whole_number(1))
            ->needs("--ckpt-dir");
    app.add_option("--prompt", g.prompt,
                   "with --generate: the text the model continues (default: a newline)")
        ->check(CLI::Validator(
            [](const std::string& text) {
              return text.empty() ? std::string("expected at least one byte") : std::string();
            },
            "TEXT"))
        ->needs(generate);
    app.add_option("--temperature", g.temperature,
                   "with --generate: draw each byte from softmax(logits / T); 0: the most likely "
                   "byte every time")
        ->capture_default_str()
        ->check(finite_number(0, bound::closed))
        ->needs(generate);
    app.add_option("--sample-seed", g.seed, "with --generate: the seed of the draws")
        ->capture_default_str()
        ->transform(whole_number<std::uint64_t>(0))
        ->needs(generate);
  }
  CLI::Option* dry_run = app.add_flag("--dry-run", c.dry_run,
               "train nothing: print what a step of this run would take on each rank of the "
               "mesh (tensor memory, matrix FLOPs, what each axis's collectives move), found by "
               "running the step on tensors without values (tpx::dry_run); any mesh size, on "
               "this machine")
      ->excludes("--ckpt-dir")
      ->excludes("--profile-phases");
  if (on_gpu) dry_run->excludes("--cuda-graph");
  if (backends.size() > 1)
    app.add_option("--backend", c.backend, "how the ranks run")
        ->capture_default_str()
        ->check(CLI::IsMember(backends));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, error;
    result.status = app.exit(e, out, error);
    result.out = out.str();
    result.error = error.str();
    return result;
  }
  // --generate takes the model from its checkpoint and trains nothing: a model or training flag
  // beside it is refused rather than ignored.
  if (c.generate.bytes > 0)
    for (const CLI::Option* given : app.get_options()) {
      const std::string name = given->get_name();
      if (given->count() == 0 || name == "--generate" || name == "--prompt" ||
          name == "--temperature" || name == "--sample-seed" || name == "--ckpt-dir")
        continue;
      result.status = 1;
      result.error = std::string(program) + ": --generate trains nothing and reads the model, " +
                     "its sizes included, from the checkpoint in --ckpt-dir: drop " + name + "\n";
      return result;
    }
  try {
    std::tie(o.mesh_r, o.mesh_x, o.mesh_y) = parse_mesh(mesh, replicas);
  } catch (const std::exception& e) {
    result.status = 1;
    result.error = std::string(program) + ": " + e.what() + "\n";
    return result;
  }
  if constexpr (with_overlap<typename Family::config>) o.model.overlap = overlap == "on";
  o.model.checkpoint_every =
      checkpoint_every == "sqrt" ? sqrt_policy(o.model.layers) : std::stoi(checkpoint_every);
  // Flags each valid alone that the family cannot combine (optional: Family::unsupported).
  if constexpr (requires { Family::unsupported(o.model); }) {
    if (const std::string why = Family::unsupported(o.model); !why.empty()) {
      result.status = 1;
      result.error = std::string(program) + ": " + why + "\n";
      return result;
    }
  }
  // What the mesh cannot hold (optional: Family::unsupported_on(config, r, x, y)).
  if constexpr (requires { Family::unsupported_on(o.model, 1, 1, 1); }) {
    if (const std::string why = Family::unsupported_on(o.model, o.mesh_r, o.mesh_x, o.mesh_y);
        !why.empty()) {
      result.status = 1;
      result.error = std::string(program) + ": " + why + "\n";
      return result;
    }
  }
  // To the nearest millisecond, at least 1: a timeout under half a millisecond was 0 ms, which
  // fails every collective a rank has to wait in (tests/fuzz/trainer_cli_fuzz.cpp checks it).
  o.timeout = std::chrono::milliseconds(std::max<std::int64_t>(
      1, static_cast<std::int64_t>(std::min(timeout_seconds, 1e9) * 1e3 + 0.5)));
  result.options = std::move(c);
  return result;
}

}  // namespace trainer

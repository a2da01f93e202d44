// The command line of the example trainers (tpx-train, tpx-gpt and their CUDA twins), parsed and
// checked without training anything: parse_command_line<Family> returns either the options to
// train with or what the program must print and the status it must exit with instead (--help,
// or an error naming the flag). cli.hpp's train_main prints that and trains; the fuzzing harness
// tests/fuzz/trainer_cli_fuzz.cpp feeds it arbitrary argument lists.
//
// This header declares it; parse_command_line.hpp defines it with CLI11. A program's file does
// not parse CLI11: each family's parser is compiled once, in a C++ file of its own
// (trainer/command_line.cpp for the MLP, gpt/command_line.cpp; the object libraries
// tpx_trainer_command_line and tpx_gpt_command_line, examples/trainer_ranks.cmake), and linked by
// the host and CUDA programs alike. CLI11 was a fifth of the machine code of tpx-train-cuda's
// main file, compiled by nvcc's host pass in every such file (docs/ci.md has the figures). A
// family whose parser no file compiles fails to link, naming parse_command_line<Family>.
//
// TPX_TRAINER_COMMAND_LINE(Family) names one parser as an explicit instantiation does:
// `template TPX_TRAINER_COMMAND_LINE(trainer::mlp);` in the file that compiles it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "run_options.hpp"

namespace trainer {

// What --generate asks for (a family whose model writes text: model_family.hpp's writes_text).
struct generation_request {
  int bytes = 0;              // --generate N: 0 trains instead
  std::string prompt = "\n";  // what the model continues
  double temperature = 0.8;   // 0: the most likely byte every time
  std::uint64_t seed = 1;     // --sample-seed: the draws'
};

// What the command line asks for.
template <class Family>
struct command_line {
  run_options<Family> training;
  std::string backend;     // one of the names parse_command_line was given
  std::string log_path;    // --log: the JSONL log; empty: none
  int log_every = 10;      // a progress line every N steps
  double peak_gflops = 0;  // what MFU divides by; 0: measure it
  bool dry_run = false;    // --dry-run: report what a step would take instead (dry_run.hpp)
  generation_request generate;  // --generate: write text with a checkpoint's model instead
};

// What parse_command_line found: the options, or else the status to exit with after printing
// `out` (--help's text) on standard output and `error` on standard error.
template <class Family>
struct parsed_command_line {
  std::optional<command_line<Family>> options;
  int status = 0;
  std::string out;
  std::string error;
};

// Parses argv (argv[0] is the program's path) for `program` ("tpx-train"), whose --help says
// `about` of how its ranks run. `backends` names the launchers --backend may choose (the first is
// the default; with one, there is no --backend). A program on the GPU also has --cuda-graph.
template <class Family>
parsed_command_line<Family> parse_command_line(int argc, const char* const* argv,
                                               const char* program, const std::string& about,
                                               const std::vector<std::string>& backends,
                                               bool on_gpu = false);

}  // namespace trainer

#define TPX_TRAINER_COMMAND_LINE(Family)                                                         \
  trainer::parsed_command_line<Family> trainer::parse_command_line<Family>(                      \
      int, const char* const*, const char*, const std::string&, const std::vector<std::string>&, \
      bool)

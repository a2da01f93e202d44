// libFuzzer harness of the example trainers' command line (trainer::parse_command_line,
// examples/trainer/parse_command_line.hpp, which tpx-train's, tpx-gpt's and their CUDA twins' main
// parse with before training). Each input is an argument list, one argument per line; the first
// picks the program, which is then argv[0] (as when started from PATH; CLI11 names its errors
// after argv[0], and a program named "RuntimeError" would print none): a first line with "gpt"
// in it parses tpx-gpt's flags (gpt::family), any other tpx-train's (trainer::mlp), and with
// "cuda" in it too, tpx-gpt-cuda's or tpx-train-cuda's (--backend simulated or nccl, --cuda-graph).
// Whatever the arguments, parsing must not crash or hit undefined behaviour (ASan and UBSan), and
// must end in one of:
//   - options to train with, every value within the range its flag documents, checked here
//     independently of the validators: --steps, --batch, --log-every and --report-every at
//     least 1; every size flag at least the least its family allows (1; 256 for --vocab);
//     --checkpoint-every, --save-every and --keep at least 0; --lr finite and > 0;
//     --weight-decay, --clip and --peak-gflops finite and >= 0; a mesh of positive sizes whose
//     product is an int; a timeout of at least 1 ms; a backend offered; --resume only with a
//     checkpoint folder; --dry-run without --ckpt-dir, --profile-phases or --cuda-graph;
//     tpx-gpt's --generate N at least 0 (0: not asked), and when asked, with a checkpoint folder
//     and neither --dry-run nor --resume, a --prompt of at least one byte, a --temperature finite
//     and >= 0;
//   - --help: the help text on standard output, exit status 0;
//   - an error on standard error, non-zero status, that starts as the programs' errors do:
//     CLI11's naming a declared flag ("--steps: expected ...", "--resume requires --ckpt-dir"),
//     the arguments it did not expect, or a switch given a value it cannot read ("Could not
//     convert: --bf16 = g"; never a number, which its check would then have read otherwise, as
//     it did 08 before cli_checks.hpp rewrote accepted numbers), then "Run with --help for more
//     information."; or the program's own "tpx-train: --mesh: ...", or its one-line refusal of
//     flags it cannot combine, naming the first ("tpx-gpt: --kv-heads 3 must divide --heads 4
//     (...)", Family::unsupported and unsupported_on).
// A broken expectation prints what was parsed and traps, which libFuzzer reports with the input.
// Seeds: tests/fuzz/corpus/trainer_cli (the command lines of the READMEs and docs/bad-input.md);
// words: tests/fuzz/trainer_cli.dict.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "../../examples/gpt/family.hpp"
#include "../../examples/trainer/mlp_family.hpp"
#include "../../examples/trainer/parse_command_line.hpp"

namespace {

// The input, one argument per line (a NUL ends an argument early, as in a real argv).
std::vector<std::string> arguments(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == '\n')
      args.emplace_back();
    else
      args.back() += static_cast<char>(data[i]);
  }
  return args;
}

[[noreturn]] void broken(const std::string& what, const std::vector<std::string>& args) {
  std::fprintf(stderr, "trainer_cli_fuzz: %s\narguments:", what.c_str());
  for (const std::string& a : args) std::fprintf(stderr, " [%s]", a.c_str());
  std::fprintf(stderr, "\n");
  __builtin_trap();
}

// The flags without a value the program declares: a value given to one (--bf16=g) is refused.
template <class Family>
std::vector<std::string> declared_switches(bool on_gpu) {
  typename Family::config config;
  std::vector<std::string> switches = {"--bf16", "--resume", "--profile-phases", "--dry-run"};
  if (on_gpu) switches.emplace_back("--cuda-graph");
  if constexpr (requires { Family::switch_flags(config); })
    for (const trainer::switch_flag& f : Family::switch_flags(config))
      switches.emplace_back(f.name);
  return switches;
}

// Every flag the program declares: its size flags, its switches, the shared ones and --backend.
template <class Family>
std::vector<std::string> declared_flags(bool on_gpu) {
  typename Family::config config;
  std::vector<std::string> flags = {
      "--mesh",         "--steps",      "--batch",        "--lr",
      "--weight-decay", "--clip",       "--seed",         "--checkpoint-every",
      "--ckpt-dir",     "--save-every", "--keep",         "--text",
      "--log",          "--log-every",  "--report-every", "--peak-gflops",
      "--timeout",      "--backend",    "--help"};
  if constexpr (requires { config.overlap; }) flags.emplace_back("--overlap");
  if constexpr (trainer::writes_text<Family>)
    for (const char* flag : {"--generate", "--prompt", "--temperature", "--sample-seed"})
      flags.emplace_back(flag);
  for (const trainer::size_flag& f : Family::size_flags(config)) flags.emplace_back(f.name);
  for (const std::string& s : declared_switches<Family>(on_gpu)) flags.push_back(s);
  return flags;
}

// The values of accepted options against the ranges the flags document.
template <class Family>
void check_accepted(const trainer::command_line<Family>& c,
                    const std::vector<std::string>& backends,
                    const std::vector<std::string>& args) {
  const trainer::run_options<Family>& o = c.training;
  const auto expect = [&](bool holds, const std::string& what) {
    if (!holds) broken("accepted " + what, args);
  };
  expect(o.steps >= 1, "--steps " + std::to_string(o.steps));
  expect(o.model.batch >= 1, "--batch " + std::to_string(o.model.batch));
  typename Family::config model = o.model;
  for (const trainer::size_flag& f : Family::size_flags(model))
    std::visit(
        [&](auto* field) { expect(*field >= f.least, f.name + (" " + std::to_string(*field))); },
        f.field);
  expect(
      o.mesh_x >= 1 && o.mesh_y >= 1 && static_cast<std::int64_t>(o.mesh_x) * o.mesh_y <= INT_MAX,
      "--mesh " + std::to_string(o.mesh_x) + "x" + std::to_string(o.mesh_y));
  expect(std::isfinite(o.lr) && o.lr > 0, "--lr " + std::to_string(o.lr));
  expect(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
         "--weight-decay " + std::to_string(o.weight_decay));
  expect(std::isfinite(o.clip) && o.clip >= 0, "--clip " + std::to_string(o.clip));
  expect(o.model.checkpoint_every >= 0,
         "--checkpoint-every " + std::to_string(o.model.checkpoint_every));
  expect(o.save_every >= 0, "--save-every " + std::to_string(o.save_every));
  expect(o.keep >= 0, "--keep " + std::to_string(o.keep));
  expect(o.report_every >= 1, "--report-every " + std::to_string(o.report_every));
  expect(c.log_every >= 1, "--log-every " + std::to_string(c.log_every));
  expect(std::isfinite(c.peak_gflops) && c.peak_gflops >= 0,
         "--peak-gflops " + std::to_string(c.peak_gflops));
  expect(o.timeout.count() >= 1, "a timeout of " + std::to_string(o.timeout.count()) + " ms");
  expect(std::ranges::find(backends, c.backend) != backends.end(), "--backend " + c.backend);
  expect(!o.resume || !o.ckpt_dir.empty(), "--resume with an empty --ckpt-dir");
  expect(!c.dry_run || (o.ckpt_dir.empty() && !o.profile_phases && !o.cuda_graph),
         "--dry-run with --ckpt-dir, --profile-phases or --cuda-graph");
  const trainer::generation_request& g = c.generate;
  expect(g.bytes >= 0, "--generate " + std::to_string(g.bytes));
  expect(g.bytes == 0 || (!o.ckpt_dir.empty() && !c.dry_run && !o.resume),
         "--generate with an empty --ckpt-dir, --dry-run or --resume");
  expect(!g.prompt.empty(), "an empty --prompt");
  expect(std::isfinite(g.temperature) && g.temperature >= 0,
         "--temperature " + std::to_string(g.temperature));
}

// A refusal: the help text, or an error that starts as the programs' errors do (see the top).
template <class Family>
void check_refused(const trainer::parsed_command_line<Family>& p, const std::string& program,
                   bool on_gpu, const std::vector<std::string>& args) {
  if (p.status == 0) {
    if (!p.error.empty() || !p.out.starts_with(program + ": "))
      broken("status 0 without options, and not --help's text: [" + p.out + "]", args);
    return;
  }
  const std::string_view error = p.error;
  const std::string_view first_line = error.substr(0, error.find('\n'));
  if (first_line.starts_with(program + ": --mesh: expected XxY") && error.ends_with("'\n")) return;
  // The family's refusal of flags each valid alone ("tpx-gpt: --kv-heads 3 must divide --heads
  // 4 ...", Family::unsupported and unsupported_on): one line, from a flag the program declares.
  const std::vector<std::string> flags = declared_flags<Family>(on_gpu);
  const std::string own = program + ": ";
  if (first_line.starts_with(own) && error.size() == first_line.size() + 1) {
    const std::string_view rest = first_line.substr(own.size());
    if (std::ranges::any_of(flags, [&](const std::string& flag) {
          return rest.starts_with(flag + " ") && rest.size() > flag.size() + 1;
        }))
      return;
  }
  const std::string_view cli11_end = "\nRun with --help for more information.\n";
  // A value given to a switch (--bf16=g) is a conversion error; a number never is: the checks
  // (cli_checks.hpp) accept only text CLI11 converts to the number they checked.
  bool named = first_line.starts_with("The following argument was not expected: ") ||
               first_line.starts_with("The following arguments were not expected: ");
  for (const std::string& s : declared_switches<Family>(on_gpu))
    named = named || first_line.starts_with("Could not convert: " + s + " = ");
  for (const std::string& flag : flags)
    named = named || (first_line.starts_with(flag) && first_line.size() > flag.size() &&
                      (first_line[flag.size()] == ':' || first_line[flag.size()] == ' '));
  if (!named || !error.ends_with(cli11_end) || first_line.size() <= 2)
    broken("status " + std::to_string(p.status) + " with the error [" + p.error + "]", args);
}

// Parses args as `program`, whose --backend may name `backends` (with one, it has no --backend);
// a program on a GPU also has --cuda-graph.
template <class Family>
void parse(const std::vector<std::string>& args, const std::string& program,
           const std::vector<std::string>& backends, bool on_gpu) {
  std::vector<const char*> argv = {program.c_str()};  // as when started from PATH
  for (std::size_t i = 1; i < args.size(); ++i) argv.push_back(args[i].c_str());
  const trainer::parsed_command_line<Family> p = trainer::parse_command_line<Family>(
      static_cast<int>(argv.size()), argv.data(), program.c_str(), "fuzzed", backends, on_gpu);
  if (p.options)
    check_accepted(*p.options, backends, args);
  else
    check_refused(p, program, on_gpu, args);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> args = arguments(data, size);
  const bool gpt = args[0].find("gpt") != std::string::npos;
  const bool cuda = args[0].find("cuda") != std::string::npos;
  const std::vector<std::string> threads = {"threads"}, gpus = {"simulated", "nccl"};
  if (gpt)
    parse<gpt::family>(args, cuda ? "tpx-gpt-cuda" : "tpx-gpt", cuda ? gpus : threads, cuda);
  else
    parse<trainer::mlp>(args, cuda ? "tpx-train-cuda" : "tpx-train", cuda ? gpus : threads, cuda);
  return 0;
}

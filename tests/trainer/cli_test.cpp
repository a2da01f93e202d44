// The example programs' command lines turn bad input into a clear message and a failing exit
// status, never a run (issue 12, requirement 3): each case below runs the real program
// (tpx-train, tpx-gpt or tpx-plan, paths from CMake) in a child process and checks both. The table
// in docs/bad-input.md lists the same cases with the messages they get.
//
// Whole numbers with leading zeros are read as decimal, as their checks read them (010 was 8), and
// a --timeout under half a millisecond is 1 ms, not 0 (parsed in this process:
// parse_command_line.hpp).
// Beyond parsing: a --log that is the training text is refused before it is opened (it would be
// truncated), --resume with --steps not beyond the checkpoint's step is refused, and a run whose
// loss turns non-finite stops with exit status 1 before the step is saved or logged, so the JSONL
// log never holds a bare nan and `latest` stays on the last finite checkpoint. And under a small
// address-space limit (ulimit -v) the trainer on meshes 3x3, 4x4 and 8x8 fails with a message
// naming a rank within its timeout, where it used to spin in OpenBLAS's work-buffer allocation
// (kernels/blas_work_buffers.hpp) or fail to start its rank threads. --profile-phases prints a
// table with every phase of tpx-train's step, marked as often per step as the model runs it, and
// the JSONL log's last line the same phases, marks and times (no earlier line has them).
// tpx-gpt --no-sequence-parallel and --context-parallel (with either attention) name their
// layouts and log the default layout's losses. A note under a run's or dry run's first line
// names the ranks a layout leaves without rows (tpx-gpt, tpx-train, its pipeline's microbatches)
// or key heads (tpx-gpt), and only then. tpx-gpt --generate prints the prompt and
// the bytes its checkpoint's model writes on standard output, the same for the same seed. tpx-train
// --pipeline refuses stages, microbatches and schedules that do not cut the model and the batch
// evenly, naming which.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../../examples/trainer/mlp_family.hpp"
#include "../../examples/trainer/parse_command_line.hpp"
#include "../support/run_command.hpp"

namespace {

namespace fs = std::filesystem;

using result = command_result;

result run(const std::string& program, const std::string& args) {
  return run_command(program + " " + args);
}

fs::path scratch(const std::string& name) { return scratch_folder("tpx-cli-test", name); }

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

struct bad_input {
  const char* program;
  std::string args;
  std::string message;  // a part of what the program must say
};

void check_refused(const bad_input& c) {
  const result r = run(c.program, c.args);
  INFO(std::string(c.program), " ", c.args, "\n", r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find(c.message) != std::string::npos);
  CHECK(r.output.find("| loss") == std::string::npos);  // refused before any training step
}

}  // namespace

TEST_CASE("malformed or out-of-range flags are refused with what was expected") {
  const char* train = TPX_TRAIN;
  const char* gpt = TPX_GPT;
  const char* plan = TPX_PLAN;
  const std::string steps = "--steps: expected a whole number from 1 to 2147483647, got ";
  const std::string lr = "--lr: expected a finite number > 0, got ";
  const std::vector<bad_input> cases{
      {train, "--steps abc", steps + "'abc'"},
      {train, "--steps 0", steps + "'0'"},
      {train, "--steps 1.5", steps + "'1.5'"},
      {train, "--steps 2147483648", steps + "'2147483648'"},
      {train, "--batch -4", "--batch: expected a whole number from 1 to 9223372036854775807"},
      {train, "--d-model 0", "--d-model: expected a whole number from 1"},
      {train, "--layers x", "--layers: expected a whole number from 1"},
      {gpt, "--heads 0", "--heads: expected a whole number from 1"},
      {gpt, "--seq -1", "--seq: expected a whole number from 1"},
      {train, "--lr nan", lr + "'nan'"},
      {train, "--lr inf", lr + "'inf'"},
      {train, "--lr 1e39", lr + "'1e39'"},  // beyond float: would be inf
      {train, "--lr -1", lr + "'-1'"},
      {train, "--lr 0", lr + "'0'"},
      {train, "--weight-decay nan", "--weight-decay: expected a finite number >= 0, got 'nan'"},
      {train, "--clip -1", "--clip: expected a finite number >= 0, got '-1'"},
      {train, "--seed -1", "--seed: expected a whole number from 0 to 18446744073709551615"},
      {train, "--keep -1", "--keep: expected a whole number from 0"},
      {gpt, "--peak-gflops nan", "--peak-gflops: expected a finite number >= 0"},
      {train, "--mesh 2147483647x2", "--mesh: expected XxY with positive sizes whose product"},
      {train, "--mesh 4x1073741825", "--mesh: expected XxY with positive sizes whose product"},
      {train, "--mesh 2x", "--mesh: expected XxY"},
      {train, "--mesh 0x2", "--mesh: expected XxY"},
      {train, "--mesh \" 2x+3\"", "--mesh: expected XxY"},  // digits only: no sign, no blank
      {train, "--mesh 2x2x2", "--mesh: expected XxY with positive sizes"},  // no replica axis
      {gpt, "--mesh 2x2x2x2", "--mesh: expected XxY or RxXxY with positive sizes whose product"},
      {gpt, "--mesh 2x0x2", "--mesh: expected XxY or RxXxY"},
      {gpt, "--mesh 2x1073741824x1", "--mesh: expected XxY or RxXxY with positive sizes"},
      {train, "--frobnicate", "not expected: --frobnicate"},
      {train, "--text /nonexistent/tpx.txt", "--text: File does not exist"},
      {train, "--resume", "--resume requires --ckpt-dir"},
      {train, "--ckpt-dir '' --resume", "--ckpt-dir: expected the path of a folder, got ''"},
      {gpt, "--log ''", "--log: expected the path of a file, got ''"},
      {train, "--context 2147483647 --steps 1",
       "a context of 2147483647 needs at least 2147483649"},
      {train, "--timeout 0", "--timeout: expected a finite number > 0, got '0'"},
      {gpt, "--checkpoint-every -1",
       "--checkpoint-every: expected a whole number from 0 to 2147483647 or sqrt, got '-1'"},
      {train, "--checkpoint-every root",
       "--checkpoint-every: expected a whole number from 0 to 2147483647 or sqrt, got 'root'"},
      {gpt, "--timeout nan", "--timeout: expected a finite number > 0, got 'nan'"},
      {gpt, "--overlap maybe", "--overlap: maybe not in {on,off}"},
      {gpt, "--dry-run --ckpt-dir ck", "--ckpt-dir excludes --dry-run"},
      {gpt, "--context-parallel --no-sequence-parallel",
       "tpx-gpt: --context-parallel needs sequence parallelism"},
      {gpt, "--rope --head-dim 15",
       "tpx-gpt: --rope turns pairs of a head's elements: --head-dim 15 is odd"},
      {gpt, "--heads 4 --kv-heads 3",
       "tpx-gpt: --kv-heads 3 must divide --heads 4 (each key and value head serves as many "
       "query heads)"},
      {gpt, "--load-balance --fused-attention",
       "tpx-gpt: --load-balance orders each sequence's chunks over the ranks of context "
       "parallelism: add --context-parallel"},
      {gpt, "--load-balance --context-parallel", "add --fused-attention"},
      {gpt, "--load-balance --context-parallel --fused-attention --mesh 3x1 --seq 10",
       "tpx-gpt: --load-balance cuts each sequence into 2 chunks per rank of X: --seq 10 is not "
       "a multiple of 2 x 3 = 6"},
      {train, "--profile-phases --dry-run", "--profile-phases excludes --dry-run"},
      {train, "--pipeline 0", "--pipeline: expected a whole number from 1"},
      {train, "--pipeline 3",
       "tpx-train: 4 layers do not cut into 3 pipeline pieces of equal length"},
      {train, "--pipeline 2 --batch 10",
       "tpx-train: --batch 10 does not cut into --microbatches 4 of equal size"},
      {train, "--pipeline 2 --schedule 2f2b", "--schedule: 2f2b not in {gpipe,1f1b,"},
      {train, "--pipeline 2 --schedule interleaved --microbatches 3 --batch 63",
       "tpx-train: pipeline schedule of 2 stages and 3 microbatches: interleaved needs the "
       "microbatches to be a multiple of the stages"},
      {train, "--pipeline 2 --mesh 2x2x2", "--mesh: expected XxY with positive sizes"},
      {train, "--microbatches 4", "tpx-train: --microbatches is a flag of --pipeline P"},
      {train, "--fsdp-per-pass", "tpx-train: --fsdp-per-pass is a flag of --pipeline P"},
      {gpt, "--generate 5", "--generate requires --ckpt-dir"},
      {gpt, "--generate 0 --ckpt-dir ck", "--generate: expected a whole number from 1"},
      {gpt, "--prompt abc", "--prompt requires --generate"},
      {gpt, "--generate 5 --ckpt-dir ck --prompt ''", "--prompt: expected at least one byte"},
      {gpt, "--generate 5 --ckpt-dir ck --temperature -1",
       "--temperature: expected a finite number >= 0, got '-1'"},
      {gpt, "--generate 5 --ckpt-dir ck --heads 2",
       "tpx-gpt: --generate trains nothing and reads the model, its sizes included, from the "
       "checkpoint in --ckpt-dir: drop --heads"},
      {gpt, "--generate 5 --ckpt-dir ck --mesh 1x1", "drop --mesh"},
      {gpt, "--generate 5 --ckpt-dir /nonexistent/tpx-ck",
       "tpx-gpt: tpx: /nonexistent/tpx-ck: holds no checkpoint"},
      {train, "--generate 5", "not expected: 5 --generate"},  // the MLP writes no text
      {plan, "-d nan", "--d-model: expected a finite number > 0, got 'nan'"},
      {plan, "--flops 0", "--flops: expected a finite number > 0, got '0'"},
      {plan, "--mesh 99999,99999", "--mesh 99999,99999: more devices than an int counts"},
      {plan, "--mesh 0,2", "--mesh: expected a whole number from 1"},
  };
  for (const bad_input& c : cases) check_refused(c);
}

TEST_CASE("--checkpoint-every sqrt keeps every round(sqrt(L))-th block input") {
  // Parsed in this process as tpx-train parses it (parse_command_line.hpp), without training.
  for (const auto& [layers, every] :
       std::vector<std::pair<const char*, int>>{{"9", 3}, {"2", 1}, {"12", 3}, {"1", 1}}) {
    CAPTURE(layers);
    const std::vector<const char*> argv = {"tpx-train", "--layers", layers, "--checkpoint-every",
                                           "sqrt"};
    const auto parsed = trainer::parse_command_line<trainer::mlp>(
        static_cast<int>(argv.size()), argv.data(), "tpx-train", "", {"threads"});
    REQUIRE(parsed.options);
    CHECK(parsed.options->training.model.checkpoint_every == every);
  }
}

TEST_CASE("whole numbers with leading zeros are decimal, as the checks read them") {
  // CLI11 reads integers with strtoll's base 0: `--steps 010` trained 8 steps and `--batch 08`
  // failed as "Could not convert", while the checks read decimal (found by
  // tests/fuzz/trainer_cli_fuzz.cpp). The first line of a run says the steps and the batch; the
  // context check then stops it before any step.
  const result train = run(TPX_TRAIN, "--steps 010 --batch 08 --context 2147483647");
  INFO(train.output);
  CHECK(train.output.find(", 10 steps, batch 8, ") != std::string::npos);
  const result plan = run(TPX_PLAN, "--mesh 010,08");
  INFO(plan.output);
  CHECK(plan.status == 0);
  CHECK(plan.output.find("mesh X=10 Y=8 ") != std::string::npos);
}

TEST_CASE("a timeout under half a millisecond is 1 ms, not 0 (which fails every wait)") {
  // Parsed in this process as tpx-train parses it (parse_command_line.hpp), without training.
  const std::vector<std::pair<const char*, std::int64_t>> cases = {
      {"0.0001", 1}, {"0.0004", 1}, {"0.0016", 2}, {"2.5", 2500}, {"1e12", 1'000'000'000'000}};
  for (const auto& [seconds, milliseconds] : cases) {
    CAPTURE(seconds);
    const std::vector<const char*> argv = {"tpx-train", "--timeout", seconds};
    const auto parsed = trainer::parse_command_line<trainer::mlp>(
        static_cast<int>(argv.size()), argv.data(), "tpx-train", "", {"threads"});
    REQUIRE(parsed.options);
    CHECK(parsed.options->training.timeout.count() == milliseconds);
  }
}

TEST_CASE("a --log that is the training text is refused before the text is touched") {
  const fs::path dir = scratch("log-is-text");
  const fs::path text = dir / "text.txt";
  fs::copy_file("/usr/share/common-licenses/GPL-3", text);
  const auto size = fs::file_size(text);
  for (const std::string& log : {text.string(), (dir / "." / "text.txt").string()})
    check_refused(
        {TPX_TRAIN, "--steps 1 --text " + text.string() + " --log " + log, "is the training text"});
  CHECK(fs::file_size(text) == size);
}

TEST_CASE("--resume with --steps not beyond the checkpoint's step is refused") {
  const fs::path ckpt = scratch("resume-steps");
  const std::string flags =
      "--mesh 1x1 --batch 4 --d-model 8 --ffn 8 --layers 1 --ckpt-dir " + ckpt.string();
  REQUIRE(run(TPX_TRAIN, flags + " --steps 3").status == 0);
  for (const char* steps : {"3", "2"})
    check_refused({TPX_TRAIN, flags + " --resume --steps " + steps,
                   "is of step 3; --steps " + std::string(steps) + " leaves nothing to train"});
  CHECK(run(TPX_TRAIN, flags + " --resume --steps 4").status == 0);
}

TEST_CASE("tpx-gpt --generate prints the prompt and the bytes its checkpoint's model writes") {
  const fs::path ckpt = scratch("generate");
  REQUIRE(run(TPX_GPT,
              "--mesh 2x1 --steps 2 --batch 4 --seq 8 --heads 2 --head-dim 4 --ffn 8 "
              "--layers 1 --rope --ckpt-dir " +
                  ckpt.string())
              .status == 0);
  // Standard output is the text alone (any bytes: read from a file); the line saying what wrote
  // it goes to standard error.
  const std::string flags = "--generate 20 --prompt Freedom --ckpt-dir " + ckpt.string();
  const fs::path first = ckpt / "first.txt", second = ckpt / "second.txt";
  const auto generate_into = [&](const fs::path& file) {  // standard error still comes back
    return run_command("(" + std::string(TPX_GPT) + " " + flags + " >" + file.string() + ")");
  };
  const result said = generate_into(first);
  INFO(said.output);
  CHECK(said.status == 0);
  const std::string text = read(first);
  REQUIRE(text.size() == 7 + 20 + 1);  // the prompt, 20 bytes, a newline
  CHECK(text.starts_with("Freedom"));
  CHECK(text.back() == '\n');
  CHECK(said.output.find("tpx-gpt: 20 bytes in ") != std::string::npos);
  CHECK(said.output.find("by the model of step 2 in " + ckpt.string() + " (") != std::string::npos);
  CHECK(said.output.find("rotary positions") != std::string::npos);  // the checkpoint's model
  REQUIRE(generate_into(second).status == 0);
  CHECK(read(second) == text);  // the same seed, the same text
}

TEST_CASE("the trainers name the ranks a layout leaves without work, and only those") {
  const std::string tiny = "--steps 1 --seq 8 --heads 2 --head-dim 4 --ffn 8 --layers 1";
  const result heads = run(TPX_GPT, tiny + " --mesh 1x2 --batch 2 --kv-heads 1");
  INFO(heads.output);
  CHECK(heads.status == 0);
  CHECK(heads.output.find("tpx-gpt: note: ranks without a key head: 1 of each 2 of Y (1 key and "
                          "value heads)") != std::string::npos);
  const result rows = run(TPX_GPT, tiny + " --mesh 3x1 --batch 2 --dry-run");
  INFO(rows.output);
  CHECK(rows.status == 0);
  CHECK(rows.output.find("tpx-gpt --dry-run: note: ranks without a row: 1 of the 3 of R x X "
                         "(--batch 2)") != std::string::npos);
  const std::string mlp = "--steps 1 --d-model 8 --ffn 8 --layers 2 --dry-run";
  const result pipeline =
      run(TPX_TRAIN, mlp + " --mesh 4x1 --batch 4 --pipeline 2 --microbatches 2");
  INFO(pipeline.output);
  CHECK(pipeline.output.find("tpx-train --dry-run: note: ranks without a row: 2 of the 4 of X "
                             "(--batch 4 in --microbatches 2 of 2)") != std::string::npos);
  CHECK(run(TPX_TRAIN, mlp + " --mesh 4x1 --batch 4").output.find("note:") == std::string::npos);
  const result busy = run(TPX_GPT, tiny + " --mesh 2x2 --batch 2");
  CHECK(busy.status == 0);
  CHECK(busy.output.find("note:") == std::string::npos);
}

TEST_CASE("a non-finite loss stops the run before the step is saved or logged") {
  // lr 1e30 is finite, so the flags accept it; the first update sends the weights to +-1e30 and
  // the next loss to nan or inf.
  for (const char* program : {TPX_TRAIN, TPX_GPT}) {
    const fs::path dir =
        scratch(std::string("non-finite-") + fs::path(program).filename().string());
    const std::string log = (dir / "log.jsonl").string();
    const result r = run(program, "--mesh 2x1 --steps 6 --lr 1e30 --save-every 1 --log " + log +
                                      " --ckpt-dir " + (dir / "ckpt").string());
    INFO(std::string(program), "\n", r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("stopping before anything of this step is saved or logged") !=
          std::string::npos);
    const std::string jsonl = read(log);
    CHECK(jsonl.find("nan") == std::string::npos);
    CHECK(jsonl.find("inf") == std::string::npos);
    CHECK(jsonl.find("\"step\": 0") != std::string::npos);  // the finite first step is logged
    // Every saved checkpoint is of a step whose loss was logged: one per logged line.
    std::size_t logged = 0, saved = 0;
    for (std::size_t at = jsonl.find("\"step\""); at != std::string::npos;
         at = jsonl.find("\"step\"", at + 1))
      ++logged;
    for (const auto& entry : fs::directory_iterator(dir / "ckpt"))
      saved += entry.is_directory() && entry.path().filename().string().starts_with("step-");
    CHECK(saved == std::min<std::size_t>(logged, 3));  // --keep 3
  }
}

TEST_CASE("tpx-gpt's and tpx-train's log give the exposed communication share, at most the total") {
  // Each line's "exposed_collective_share" <= its "collective_share" (equal with --overlap off),
  // beside the fields scripts/plot-loss.sh reads; with --overlap on the first line says so.
  const fs::path dir = scratch("exposed-share");
  struct program {
    const char* path;
    std::string flags;
  };
  for (const program& p :
       {program{TPX_GPT, "--batch 4 --seq 8 --heads 2 --head-dim 4 --ffn 8 --layers 2"},
        program{TPX_TRAIN, "--batch 8 --d-model 8 --ffn 16 --layers 2"}})
    for (const std::string overlap : {"on", "off"}) {
      const std::string log =
          (dir / (fs::path(p.path).filename().string() + "-" + overlap + ".jsonl")).string();
      std::string args = "--mesh 2x1 --steps 4 --peak-gflops 10 ";  // appended: GCC 12 -Wrestrict
      args.append(p.flags).append(" --overlap ").append(overlap).append(" --log ").append(log);
      const result r = run(p.path, args);
      INFO(p.path, " --overlap ", overlap, "\n", r.output);
      REQUIRE(r.status == 0);
      CHECK((r.output.find("FSDP collectives in the background") != std::string::npos) ==
            (overlap == "on"));
      std::istringstream lines(read(log));
      int checked = 0;
      for (std::string line; std::getline(lines, line); ++checked) {
        INFO(line);
        const auto field = [&](const std::string& name) {
          const std::size_t at = line.find("\"" + name + "\": ");
          REQUIRE(at != std::string::npos);
          return std::stod(line.substr(at + name.size() + 4));
        };
        CHECK(line.starts_with("{\"step\": " + std::to_string(checked) + ", \"loss\": "));
        const double total = field("collective_share"), exposed = field("exposed_collective_share");
        CHECK(total > 0);
        if (overlap == "on")
          CHECK(exposed <= total);
        else
          CHECK(exposed == total);
      }
      CHECK(checked == 4);
    }
}

TEST_CASE("tpx-gpt's other layouts say so and log the losses of the default one's run") {
  // The flags reach the model (gpt::config::plain_tensor_parallel, context_parallel,
  // load_balance): each run names its layout in its first line, and its logged losses equal
  // those of the default layout's run (FSDP over X, sequence parallelism over Y) within 1e-5 relative (the same model;
  // sums over X and Y in other orders), on a mesh where X and Y have 2 ranks.
  const fs::path dir = scratch("layouts");
  struct layout {
    const char* flag;
    const char* says;
  };
  const std::vector<layout> layouts = {{"", ""},
                                       {" --no-sequence-parallel", "no sequence parallelism"},
                                       {" --context-parallel", "context parallel over X"},
                                       {" --context-parallel --fused-attention",
                                        "context parallel over X"},
                                       {" --context-parallel --fused-attention --load-balance",
                                        "context parallel over X (load-balanced)"}};
  std::vector<std::vector<double>> losses;
  for (const layout& l : layouts) {
    const std::string log = (dir / ("run" + std::to_string(losses.size()) + ".jsonl")).string();
    const result r = run(TPX_GPT,
                         "--mesh 2x2 --steps 4 --batch 4 --seq 8 --heads 2 --head-dim 4 "
                         "--ffn 8 --layers 2 --peak-gflops 10 --log " +
                             log + l.flag);
    INFO(l.flag, "\n", r.output);
    REQUIRE(r.status == 0);
    for (const layout& other : layouts)  // another's words only where they are part of its own
      if (*other.says)
        CHECK((r.output.find(other.says) != std::string::npos) ==
              (std::string(l.says).find(other.says) != std::string::npos));
    std::istringstream lines(read(log));
    losses.emplace_back();
    for (std::string line; std::getline(lines, line);)
      losses.back().push_back(nlohmann::json::parse(line).at("loss").get<double>());
    REQUIRE(losses.back().size() == 4);
  }
  for (std::size_t l = 1; l < layouts.size(); ++l)
    for (std::size_t s = 0; s < 4; ++s) {
      CAPTURE(layouts[l].flag);
      CAPTURE(s);
      CHECK(std::abs(losses[l][s] - losses[0][s]) <= 1e-5 * std::abs(losses[0][s]));
    }
}

TEST_CASE("--profile-phases prints each phase of tpx-train's step with its marks per step") {
  // 2 layers over 5 steps: the table covers the last 4, each block phase marked twice per step.
  const std::string log = (scratch("profile-phases") / "log.jsonl").string();
  const result r = run(TPX_TRAIN,
                       "--mesh 2x2 --steps 5 --batch 16 --d-model 16 --ffn 32 --layers 2 "
                       "--peak-gflops 10 --profile-phases --log " +
                           log);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("phases of rank 0's step, mean of the last 4 steps") != std::string::npos);
  const auto marks_per_step = [&](const std::string& phase) {
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);)
      if (line.starts_with("  " + phase + "  ")) {
        std::istringstream fields(line.substr(2 + phase.size()));
        double ms = 0, marks = 0;
        std::string share;
        fields >> ms >> share >> marks;
        return marks;
      }
    return -1.0;
  };
  for (const char* per_block : {"norm", "MLP up (GELU)", "MLP down", "MLP down backward",
                                "MLP up backward", "norm backward", "MLP weight gradients"})
    CHECK_MESSAGE(marks_per_step(per_block) == 2.0, per_block);
  for (const char* once : {"batch upload", "forward and backward", "embedding forward",
                           "final norm", "LM head", "cross-entropy", "LM head backward",
                           "final norm backward", "embedding backward", "gradient norm", "AdamW"})
    CHECK_MESSAGE(marks_per_step(once) == 1.0, once);
  CHECK(r.output.find("  (in no phase)") != std::string::npos);

  // The log's last line holds the table's figures, in the order the step marks its phases; the
  // lines before it none.
  std::istringstream lines(read(log));
  std::vector<nlohmann::json> logged;
  for (std::string line; std::getline(lines, line);) logged.push_back(nlohmann::json::parse(line));
  REQUIRE(logged.size() == 5);
  for (std::size_t s = 0; s + 1 < logged.size(); ++s) CHECK_FALSE(logged[s].contains("phases"));
  const nlohmann::json& last = logged.back();
  CHECK(last["phase_steps"] == 4);
  const nlohmann::json& phases = last["phases"];
  REQUIRE(phases.is_array());
  CHECK(phases.front()["name"] == "batch upload");
  double logged_ms = 0;
  for (const nlohmann::json& p : phases) {
    const std::string name = p["name"];
    CAPTURE(name);
    CHECK(p["marks_per_step"].get<double>() == marks_per_step(name));
    CHECK(p["ms_per_step"].get<double>() >= 0);
    logged_ms += p["ms_per_step"].get<double>();
  }
  CHECK(logged_ms <= last["phase_ms_per_step"].get<double>() * (1 + 1e-9));
}

TEST_CASE("under ulimit -v the trainer ends within its timeout, or fails naming a rank") {
  // 700 MB: more than the program needs to start, seldom enough for its ranks' OpenBLAS work
  // buffers (128 MiB each, as many as fit, then shared: kernels/blas_work_buffers.hpp), thread
  // stacks (8 MiB each) and malloc arenas (64 MiB each) together. Ten runs of each: a race between
  // a rank's check of the room for a buffer and OpenBLAS's allocation once hung one run in ten of
  // 4x4; and which allocation fails first, or whether one does, varies from run to run.
  int failed = 0;
  for (int run_number = 0; run_number < 10; ++run_number) {
    for (const char* mesh : {"3x3", "4x4", "8x8"}) {
      const auto start = std::chrono::steady_clock::now();
      const result r = run("ulimit -v 700000; exec timeout -s KILL 30 " + std::string(TPX_TRAIN),
                           std::string("--mesh ") + mesh + " --steps 3 --timeout 5");
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      INFO("run ", run_number, ", mesh ", std::string(mesh), ", ", took.count(), " s:\n", r.output);
      CHECK(r.status < 128);  // an exit, not a signal (nor timeout's KILL)
      CHECK(took.count() < 5 + 5);
      if (r.status == 0) continue;
      ++failed;
      CHECK(r.output.find("tpx: rank ") != std::string::npos);
      const bool says_why = r.output.find("out of memory") != std::string::npos ||
                            r.output.find("could not be started") != std::string::npos;
      CHECK(says_why);
    }
  }
  CHECK(failed >= 10);  // every 8x8 run at least: 64 ranks' stacks and buffers cannot fit
}

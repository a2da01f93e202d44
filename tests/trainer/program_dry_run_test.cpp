// The example programs' --dry-run as a user runs it: tpx-gpt and tpx-train (or, built in the CUDA
// tests, tpx-gpt-cuda and tpx-train-cuda: TPX_PROGRAMS_ON_GPU) started in a child process with
// --dry-run and --log, their JSON report checked against the models' own counts, worked out here
// from the shapes: summed over the ranks of a mesh that splits every parameter evenly, the memory
// held between steps is 16 bytes per parameter (fp32 weight, gradient and two AdamW moments),
// and for the MLP the products' FLOPs are the model's 6 per weight and token. The trainers' own
// dry-run tests (dry_run_test.cpp) compare a dry run with a real one in-process; this one proves
// the programs' flag, report and log, that a real run's log reads what the dry run counts, and
// (with tpx-plan: TPX_PLAN) that tpx-plan --reports prices the reports as they say, a pipeline's
// with its schedule's bubble, a run with --overlap on with its background tasks' traffic hidden
// behind its products, and one without with none hidden. tpx-train --pipeline's report
// (tpx-train-cuda's in the CUDA tests) carries its stages and bubble.
//
// The CUDA programs answer what needs no GPU on a machine without one (examples/trainer/
// cuda_main.hpp): --help, a refused flag and --dry-run, so that a user sizes a GPU run from a
// login node; a command line that trains there exits with 77 and points to --dry-run, and with a
// GPU it trains. CI has no GPU, so this test is one of the CUDA stage's that runs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../support/run_command.hpp"

namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) { return scratch_folder("tpx-program-dry-run-test", name); }

// The report --dry-run writes to --log `log`, after checking the run printed one and trained nothing.
nlohmann::json dry_run_report(const std::string& program, const std::string& args, const fs::path& log) {
  const command_result r = run_command(program + " --dry-run " + args + " --log " + log.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("| loss") == std::string::npos);
  CHECK(r.output.find("peak during a step") != std::string::npos);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json report = nlohmann::json::parse(text.str());
  CHECK(report.at("dry_run") == true);
  return report;
}

// What a report's collectives over one set of axes put on a rank's link.
double link_bytes_of(const nlohmann::json& collectives) {
  double link_bytes = 0;
  for (const nlohmann::json& c : collectives) link_bytes += c.at("link_bytes").get<double>();
  return link_bytes;
}

// The communication time of the report's rank that communicates longest (the first of equals),
// in ms per set of axes, each axis set's link bytes at bandwidth(axes).
struct rank_communication {
  int rank = 0;
  double ms = 0;
  std::map<std::string, double> ms_by_axes;
};
template <class Bandwidth>
rank_communication longest_communication(const nlohmann::json& report, Bandwidth bandwidth) {
  rank_communication longest{-1, -1, {}};
  for (const nlohmann::json& rank : report.at("ranks")) {
    rank_communication c{rank.at("rank").get<int>(), 0, {}};
    for (const auto& [axes, collectives] : rank.at("traffic").items()) {
      const double link_bytes = link_bytes_of(collectives);
      if (link_bytes == 0) continue;
      c.ms_by_axes[axes] = link_bytes / bandwidth(axes) * 1e3;
      c.ms += c.ms_by_axes[axes];
    }
    if (c.ms > longest.ms) longest = c;
  }
  return longest;
}

// Bounds on the step of the report's slowest rank as the program overlaps it, in ms, each set of
// axes' link bytes at bandwidth(axes) and products at `flops`: at least the longer of each rank's
// products plus its communication outside background tasks and its background tasks'
// communication (every task hidden), at most its products plus all its communication (none).
struct step_bounds {
  double lower = 0, upper = 0;
};
template <class Bandwidth>
step_bounds program_step_bounds(const nlohmann::json& report, double flops, Bandwidth bandwidth) {
  step_bounds slowest;
  for (const nlohmann::json& rank : report.at("ranks")) {
    double all_ms = 0, background_ms = 0;
    for (const auto& [axes, collectives] : rank.at("traffic").items())
      all_ms += link_bytes_of(collectives) / bandwidth(axes) * 1e3;
    for (const auto& [axes, collectives] : rank.at("background_traffic").items())
      background_ms += link_bytes_of(collectives) / bandwidth(axes) * 1e3;
    const double compute_ms = rank.at("matrix_flops").get<double>() / flops * 1e3;
    slowest.lower =
        std::max(slowest.lower, std::max(compute_ms + all_ms - background_ms, background_ms));
    slowest.upper = std::max(slowest.upper, all_ms + compute_ms);
  }
  return slowest;
}

std::int64_t held_bytes(const nlohmann::json& report) {
  std::int64_t held = 0;
  for (const nlohmann::json& rank : report.at("ranks")) {
    held += rank.at("state_bytes").get<std::int64_t>();
    CHECK(rank.at("peak_bytes").get<std::int64_t>() > rank.at("state_bytes").get<std::int64_t>());
  }
  return held;
}

}  // namespace

TEST_CASE("--dry-run of the GPT program reports every rank's memory and both axes' traffic") {
  const std::int64_t seq = 8, heads = 2, e = 4, ffn = 16, layers = 2, vocab = 256;
  const nlohmann::json report =
      dry_run_report(TPX_GPT, "--mesh 2x2 --batch 4 --seq 8 --heads 2 --head-dim 4 --ffn 16 --layers 2",
                     scratch("gpt") / "dry.json");
  REQUIRE(report.at("ranks").size() == 4);
  // Embeddings of tokens and positions, per block two norms, Q, K, V, O and the MLP's two
  // matrices, the final norm and the LM head.
  const std::int64_t d = heads * e;
  const std::int64_t parameters =
      vocab * d + seq * d + layers * (2 * d + 4 * d * d + 2 * d * ffn) + d + d * vocab;
  CHECK(held_bytes(report) == 16 * parameters);
  // Both axes carry the step: FSDP's gathers and scatters over X, sequence parallelism's over Y.
  for (const char* axis : {"X", "Y"}) {
    INFO(axis);
    const nlohmann::json& rank_0 = report.at("ranks").at(0).at("traffic");
    CHECK(rank_0.at(axis).at("all_gather").at("link_bytes").get<double>() > 0);
    CHECK(rank_0.at(axis).at("reduce_scatter").at("link_bytes").get<double>() > 0);
  }
}

TEST_CASE("--dry-run names the busiest rank: context parallelism's last block with fused attention") {
  // T = 8 over X = 4: blocks of 2 queries from positions 0, 2, 4, 6. The fused kernels' products
  // run over the pairs each block sees, 2 first + 3, so rank r's exceed rank 0's by those of
  // 2 x 2r more pairs per sequence (batch 4 x 2 heads) and layer (2): 9 products of 2 E FLOPs
  // each (meta_space's count). Every other product is the same on every rank.
  const nlohmann::json report = dry_run_report(
      TPX_GPT,
      "--mesh 4x1 --batch 4 --seq 8 --heads 2 --head-dim 4 --ffn 16 --layers 2 --context-parallel "
      "--fused-attention",
      scratch("context") / "dry.json");
  REQUIRE(report.at("ranks").size() == 4);
  // The report names the layout and attention, as the run's first line does.
  const std::string description = report.at("description").get<std::string>();
  CHECK(description.find("context parallel over X") != std::string::npos);
  CHECK(description.find("fused attention") != std::string::npos);
  const double rank_0 = report.at("ranks").at(0).at("matrix_flops").get<double>();
  for (int r = 1; r < 4; ++r) {
    CAPTURE(r);
    const double more_pairs = 4.0 * 2 * 2 * (2.0 * 2 * r);
    CHECK(report.at("ranks").at(r).at("matrix_flops").get<double>() - rank_0 ==
          doctest::Approx(more_pairs * 9 * 2 * 4).epsilon(1e-12));
  }
  const command_result r = run_command(std::string(TPX_GPT) +
                                       " --dry-run --mesh 4x1 --batch 4 --seq 8 --heads 2 --head-dim 4 --ffn 16 "
                                       "--layers 2 --context-parallel --fused-attention");
  INFO(r.output);
  CHECK(r.output.find("matrix FLOPs per step: ") != std::string::npos);
  CHECK(r.output.find("(rank 3); ") != std::string::npos);  // the busiest, closing the spread
}

TEST_CASE("--dry-run of the MLP program counts its parameters' memory and its model FLOPs") {
  const std::int64_t batch = 16, d = 16, ffn = 32, layers = 2, context = 3, vocab = 256;
  const nlohmann::json report = dry_run_report(
      TPX_TRAIN, "--mesh 2x2 --batch 16 --d-model 16 --ffn 32 --layers 2 --context 3",
      scratch("mlp") / "dry.json");
  REQUIRE(report.at("ranks").size() == 4);
  // An embedding per context position, per block a norm and two matrices, the final norm, the head.
  const std::int64_t parameters =
      context * vocab * d + layers * (d + 2 * d * ffn) + d + d * vocab;
  CHECK(held_bytes(report) == 16 * parameters);
  // No checkpointing: the ranks' products are one forward and two backward products of every
  // matrix (2 FLOPs a multiply-add each) over the batch, the embeddings' gathers none.
  double flops = 0;
  for (const nlohmann::json& rank : report.at("ranks")) flops += rank.at("matrix_flops").get<double>();
  CHECK(flops == doctest::Approx(6.0 * batch * (layers * 2 * d * ffn + d * vocab)).epsilon(1e-12));
}

TEST_CASE("a real run logs the link bytes per step and the peak memory that --dry-run counts") {
  // The same flags trained for three steps (rank 0's collectives are the same every step) and
  // dry-run: the log's link bytes per set of axes, every step, are the dry run's summed over its
  // collectives. The progress output names them once.
  const std::string flags = "--mesh 2x2 --batch 4 --seq 8 --heads 2 --head-dim 4 --ffn 16 --layers 2";
  const fs::path folder = scratch("real-and-dry");
  const nlohmann::json dry = dry_run_report(TPX_GPT, flags, folder / "dry.json");
  const command_result r = run_command(std::string(TPX_GPT) + " " + flags +
                                       " --steps 3 --peak-gflops 1 --log " + (folder / "run.jsonl").string());
  INFO(r.output);
  if (r.status == 77) {
    MESSAGE("no GPU for the CUDA program's real run: its half of the case is not run");
    return;
  }
  REQUIRE(r.status == 0);
  CHECK(r.output.find("rank 0's collectives put on its link per step: X ") != std::string::npos);
  std::ifstream lines(folder / "run.jsonl");
  int steps = 0;
  std::int64_t peak_bytes = 0;
  for (std::string line; std::getline(lines, line); ++steps) {
    INFO("step ", steps);
    peak_bytes = nlohmann::json::parse(line).at("peak_bytes").get<std::int64_t>();
    const nlohmann::json logged = nlohmann::json::parse(line).at("link_bytes_per_step");
    const nlohmann::json& rank_0 = dry.at("ranks").at(0).at("traffic");
    CHECK(logged.size() == rank_0.size());
    for (const auto& [axes, collectives] : rank_0.items()) {
      INFO(axes);
      const double link_bytes = link_bytes_of(collectives);
      CHECK(logged.at(axes).get<double>() == doctest::Approx(link_bytes).epsilon(1e-12));
    }
  }
  CHECK(steps == 3);
  // Rank 0's peak tensor memory: the dry run takes the CUDA space's paths (whole-row norm and loss
  // kernels), which the CUDA program's real run takes too; the host program's differ by a few
  // bytes of temporaries.
  const auto dry_peak = dry.at("ranks").at(0).at("peak_bytes").get<std::int64_t>();
#ifdef TPX_PROGRAMS_ON_GPU
  CHECK(peak_bytes == dry_peak);
#else
  CHECK(static_cast<double>(peak_bytes) == doctest::Approx(static_cast<double>(dry_peak)).epsilon(0.01));
#endif
}

namespace {
// The dry-run report of --pipeline 2 on 1x1 in 1F1B over `microbatches` M, written to `file`,
// after checking its pipeline: each stage idles (P - 1) / (M + P - 1) of the step (seed 001, the
// bubble).
nlohmann::json pipeline_report(int microbatches, const fs::path& file) {
  // appended, not `"..." + ...`: GCC 12 -O3 -Wrestrict
  std::string args =
      "--pipeline 2 --mesh 1x1 --batch 16 --d-model 16 --ffn 32 --layers 2 --microbatches ";
  args.append(std::to_string(microbatches));
  nlohmann::json report = dry_run_report(TPX_TRAIN, args, file);
  CHECK(report.at("ranks").size() == 2);
  const nlohmann::json& pipeline = report.at("pipeline");
  CHECK(pipeline.at("stages").get<int>() == 2);
  CHECK(pipeline.at("microbatches").get<int>() == microbatches);
  CHECK(pipeline.at("schedule").get<std::string>() == "1f1b");
  CHECK(pipeline.at("bubble").get<double>() ==
        doctest::Approx(1.0 / (microbatches + 1)).epsilon(1e-12));
  return report;
}
}  // namespace

TEST_CASE("--pipeline's dry run reports its stages and its schedule's bubble") {
  // tpx-train --pipeline, and in the CUDA tests tpx-train-cuda --pipeline, on a machine without
  // a GPU.
  pipeline_report(8, scratch("pipeline") / "8.json");
}

#ifdef TPX_PLAN
TEST_CASE("tpx-plan prices dry-run reports and recommends the fastest mesh that fits") {
  // Three meshes of the same GPT, and 2x2 with --overlap on, priced on a made-up device: 1
  // TFLOP/s, links of 1 GB/s, X's of 0.5 GB/s, and memory just short of the largest rank's peak
  // among them, so that one mesh does not fit. Each row is worked out here from the reports, the
  // step of the run with overlap bounded (the next test replays a timeline by hand).
  const fs::path folder = scratch("plan");
  const std::string model = "--batch 8 --seq 16 --heads 4 --head-dim 8 --ffn 64 --layers 2";
  std::vector<nlohmann::json> reports;
  std::string files;
  for (const std::string layout : {"4x1", "2x2", "1x4", "2x2 --overlap on"}) {
    const fs::path file =
        folder / (layout.substr(0, 3) + (layout.size() > 3 ? "-overlap" : "") + ".json");
    reports.push_back(dry_run_report(TPX_GPT, "--mesh " + layout + " " + model, file));
    files.append(" ").append(file.string());  // not `" " + ...`: GCC 12 -O3 -Wrestrict
  }
  // With --overlap on, part of each rank's traffic over X (FSDP's) runs in background tasks;
  // without, none.
  for (std::size_t i = 0; i < reports.size(); ++i)
    for (const nlohmann::json& rank : reports[i].at("ranks")) {
      const nlohmann::json& traffic = rank.at("traffic");
      for (auto set = traffic.begin(); set != traffic.end(); ++set) {
        INFO("report " << i << ", rank " << rank.at("rank") << ", axes " << set.key());
        const double background = link_bytes_of(rank.at("background_traffic").at(set.key()));
        CHECK(background <= link_bytes_of(set.value()));
        if (i < 3) CHECK(background == 0);
        if (i == 3 && set.key() == "X") CHECK(background > 0);
      }
    }
  const auto peak_of = [](const nlohmann::json& report) {
    double peak = 0;
    for (const nlohmann::json& r : report.at("ranks")) peak = std::max(peak, r.at("peak_bytes").get<double>());
    return peak;
  };
  double largest_peak = 0;
  for (const nlohmann::json& report : reports) largest_peak = std::max(largest_peak, peak_of(report));
  const double flops = 1e12, link_bw = 1e9, x_link_bw = 5e8, memory = largest_peak - 1;
  const fs::path out = folder / "plan.json";
  const command_result r =
      run_command(std::string(TPX_PLAN) + " --reports" + files + " --flops 1e12 --link-bw 1e9 --memory " +
                  std::to_string(static_cast<long long>(memory)) + " --axis-link-bw X=5e8 --json " + out.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::ifstream in(out);
  const nlohmann::json plan = nlohmann::json::parse(in);
  REQUIRE(plan.at("rows").size() == reports.size());
  std::string fastest;
  double fastest_rate = 0;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const nlohmann::json& report = reports[i];
    const nlohmann::json& row = plan.at("rows")[i];
    INFO(row.dump());
    double busiest = 0;
    for (const nlohmann::json& rank : report.at("ranks"))
      busiest = std::max(busiest, rank.at("matrix_flops").get<double>());
    const double compute_ms = busiest / flops * 1e3;
    CHECK(row.at("compute_ms").get<double>() == doctest::Approx(compute_ms).epsilon(1e-12));
    const rank_communication longest = longest_communication(report, [&](const std::string& axes) {
      return axes.find('X') != std::string::npos ? x_link_bw : link_bw;
    });
    CHECK(row.at("comm_rank").get<int>() == longest.rank);
    CHECK(row.at("comm_ms_by_axes").size() == longest.ms_by_axes.size());
    for (const auto& [axes, ms] : longest.ms_by_axes)
      CHECK(row.at("comm_ms_by_axes").at(axes).get<double>() == doctest::Approx(ms).epsilon(1e-12));
    const double comm_ms = longest.ms;
    CHECK(row.at("comm_ms").get<double>() == doctest::Approx(comm_ms).epsilon(1e-12));
    const step_bounds bounds = program_step_bounds(report, flops, [&](const std::string& axes) {
      return axes.find('X') != std::string::npos ? x_link_bw : link_bw;
    });
    const double step_ms = row.at("step_ms").get<double>();
    CHECK(step_ms >= bounds.lower * (1 - 1e-12));
    CHECK(step_ms <= bounds.upper * (1 + 1e-12));
    CHECK(row.at("exposed_ms").get<double>() ==
          doctest::Approx(step_ms - compute_ms).epsilon(1e-12));
    CHECK(row.at("step_ms_all_hidden").get<double>() ==
          doctest::Approx(std::max(compute_ms, comm_ms)).epsilon(1e-12));
    CHECK(row.at("step_ms_without_overlap").get<double>() ==
          doctest::Approx(compute_ms + comm_ms).epsilon(1e-12));
    // Without background tasks nothing hides: the step is the products and all communication.
    if (i < 3) CHECK(step_ms == doctest::Approx(compute_ms + comm_ms).epsilon(1e-12));
    const bool fits = peak_of(report) <= memory;
    CHECK(row.at("fits").get<bool>() == fits);
    CHECK(row.at("pipeline").is_null());  // no stages
    CHECK(row.at("description") == report.at("description"));
    const double rate = report.at("model_flops").get<double>() / step_ms;
    if (fits && rate > fastest_rate) fastest = row.at("report").get<std::string>(), fastest_rate = rate;
  }
  CHECK(!fastest.empty());
  CHECK(plan.at("recommendation").get<std::string>() == fastest);
  // Overlap shortens 2x2's step by what its background tasks hide.
  CHECK(plan.at("rows")[3].at("step_ms").get<double>() <
        plan.at("rows")[1].at("step_ms").get<double>());
  CHECK(r.output.find("# recommendation: " + fastest) != std::string::npos);

  // The fp32 reports are named on one line (a sweep prices dozens): "every report", or the fp32
  // ones among bf16 ones.
  CHECK(r.output.find("# every report is fp32: the profile's FLOP/s is its bf16 peak") !=
        std::string::npos);
  const fs::path bf16_file = folder / "2x2-bf16.json";
  dry_run_report(TPX_GPT, "--mesh 2x2 --bf16 " + model, bf16_file);
  const std::string first = (folder / "4x1.json").string(), last = (folder / "1x4.json").string();
  const command_result types = run_command(std::string(TPX_PLAN) + " --reports " + first + " " +
                                           bf16_file.string() + " " + last);
  INFO(types.output);
  CHECK(types.output.find(std::string("# ").append(first).append(", ").append(last).append(
            " are fp32: ")) != std::string::npos);

  const command_result unknown_axis = run_command(std::string(TPX_PLAN) + " --reports" + files + " --axis-link-bw Z=1e9");
  CHECK(unknown_axis.status != 0);
  CHECK(unknown_axis.output.find("--axis-link-bw Z: no report's mesh has an axis Z") != std::string::npos);
  const command_result not_a_report = run_command(std::string(TPX_PLAN) + " --reports " + out.string());
  CHECK(not_a_report.status != 0);
  CHECK(not_a_report.output.find(out.string() + ": not a --dry-run report") != std::string::npos);
  const command_result mixed = run_command(std::string(TPX_PLAN) + " --reports" + files + " --layers 4");
  CHECK(mixed.status != 0);
  CHECK(mixed.output.find("--layers excludes --reports") != std::string::npos);
}

TEST_CASE("tpx-plan counts a pipeline's bubble in its compute time") {
  // The reports of pipeline_report (above) over M = 4 and 8 microbatches: each stage idles 1/5
  // and 1/9 of the step, so tpx-plan spreads the busiest rank's products over the other 4/5 and
  // 8/9.
  const fs::path folder = scratch("plan-pipeline");
  std::vector<nlohmann::json> reports;
  std::vector<double> bubbles;
  std::string files;
  for (const int microbatches : {4, 8}) {
    const fs::path file = folder / (std::to_string(microbatches) + ".json");
    reports.push_back(pipeline_report(microbatches, file));
    bubbles.push_back(1.0 / (microbatches + 1));
    files.append(" ").append(file.string());
  }
  const fs::path out = folder / "plan.json";
  const command_result r = run_command(std::string(TPX_PLAN) + " --reports" + files +
                                       " --flops 1e12 --link-bw 1e9 --json " + out.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("# bubble: the share of a pipeline's step its stages idle") !=
        std::string::npos);
  // The bubble column of each report's row: "  4.json  1x1 P=2  2  ...  MFU  20.0%  ...".
  const auto bubble_column = [&](const std::string& file_name) {
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::vector<std::string> w{std::istream_iterator<std::string>(words), {}};
      if (w.size() > 10 && fs::path(w[0]).filename() == file_name) return w[10];
    }
    return std::string("no row");
  };
  CHECK(bubble_column("4.json") == "20.0%");  // 1/5
  CHECK(bubble_column("8.json") == "11.1%");  // 1/9
  std::ifstream in(out);
  const nlohmann::json plan = nlohmann::json::parse(in);
  REQUIRE(plan.at("rows").size() == reports.size());
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const nlohmann::json& row = plan.at("rows")[i];
    INFO(row.dump());
    double busiest = 0;
    for (const nlohmann::json& rank : reports[i].at("ranks"))
      busiest = std::max(busiest, rank.at("matrix_flops").get<double>());
    CHECK(row.at("mesh").get<std::string>() == "1x1 P=2");
    CHECK(row.at("bubble").get<double>() == doctest::Approx(bubbles[i]).epsilon(1e-12));
    // The schedule the table has no room for, and the dry run's own description.
    CHECK(row.at("pipeline").get<std::string>() ==
          "2 stages, 1f1b, " + std::to_string(i == 0 ? 4 : 8) + " microbatches");
    CHECK(row.at("description") == reports[i].at("description"));
    CHECK(row.at("compute_ms").get<double>() ==
          doctest::Approx(busiest / 1e12 / (1 - bubbles[i]) * 1e3).epsilon(1e-12));
  }
}

TEST_CASE("tpx-plan replays a rank's timeline: a task hides only behind the work before its wait") {
  // One rank at 1 TFLOP/s and 1 GB/s links, its step worked out by hand (ms):
  //   0-1    products (1e9 FLOPs); task 0 starts at 1, gathering 2 MB over X: on the lane 1-3
  //   1-1.5  products (0.5e9), then a wait for task 0 until 3
  //   3      task 1 starts, 1 MB over X: on the lane 3-4
  //   3-6    products (3e9); 6-7 the rank's own 1 MB over Y; task 1 is done: no wait
  // so 7 ms: 4.5 of products and 2.5 exposed, where hiding every task behind all the products
  // would give 5.5 (the Y collective plus 4.5) and hiding none 8.5.
  const auto bytes = [](double link_bytes) {
    return nlohmann::json{{"calls", 1}, {"data_bytes", link_bytes}, {"link_bytes", link_bytes}};
  };
  const nlohmann::json timeline =
      nlohmann::json::array({{{"flops", 1e9}, {"link_bytes", nlohmann::json::object()}},
                             {{"start", 0}, {"link_bytes", {{"X", 2e6}}}},
                             {{"flops", 0.5e9}, {"link_bytes", nlohmann::json::object()}},
                             {{"wait", 0}},
                             {{"start", 1}, {"link_bytes", {{"X", 1e6}}}},
                             {{"flops", 3e9}, {"link_bytes", nlohmann::json::object()}},
                             {{"flops", 0}, {"link_bytes", {{"Y", 1e6}}}},
                             {{"wait", 1}}});
  const nlohmann::json report = {
      {"dry_run", true},
      {"program", "by hand"},
      {"mesh", "2x2"},
      {"bf16", false},
      {"model_flops", 4 * 4.5e9},
      {"ranks",
       {{{"rank", 0},
         {"state_bytes", 1},
         {"peak_bytes", 2},
         {"matrix_flops", 4.5e9},
         {"traffic", {{"X", {{"all_gather", bytes(3e6)}}}, {"Y", {{"all_reduce", bytes(1e6)}}}}},
         {"background_traffic", {{"X", {{"all_gather", bytes(3e6)}}}}},
         {"timeline", timeline}}}}};
  const fs::path folder = scratch("plan-timeline");
  const fs::path file = folder / "by-hand.json", out = folder / "plan.json";
  std::ofstream(file) << report.dump();
  const command_result r = run_command(std::string(TPX_PLAN) + " --reports " + file.string() +
                                       " --flops 1e12 --link-bw 1e9 --json " + out.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::ifstream in(out);
  const nlohmann::json row = nlohmann::json::parse(in).at("rows").at(0);
  CHECK(row.at("compute_ms").get<double>() == doctest::Approx(4.5).epsilon(1e-12));
  CHECK(row.at("step_ms").get<double>() == doctest::Approx(7.0).epsilon(1e-12));
  CHECK(row.at("exposed_ms").get<double>() == doctest::Approx(2.5).epsilon(1e-12));
  CHECK(row.at("step_ms_all_hidden").get<double>() == doctest::Approx(4.5).epsilon(1e-12));
  CHECK(row.at("step_ms_without_overlap").get<double>() == doctest::Approx(8.5).epsilon(1e-12));

  // Waiting for a task the timeline never started is refused.
  nlohmann::json broken = report;
  broken.at("ranks").at(0).at("timeline").at(3) = {{"wait", 5}};
  std::ofstream(file) << broken.dump();
  const command_result refused = run_command(std::string(TPX_PLAN) + " --reports " + file.string());
  CHECK(refused.status != 0);
  CHECK(refused.output.find("a wait for task 5, which the timeline does not start before it") !=
        std::string::npos);
}

TEST_CASE("a dry run reports each rank's traffic; tpx-plan prices the longest to communicate") {
  // Two stages of 2x1 (P outermost: world ranks 0, 1 are stage 0, ranks 2, 3 stage 1), D = 16,
  // one byte of context: the first stage all-gathers (and reduce-scatters) over X the one
  // embedding table [V, D], the last the final norm [D] and the head [D, V], D elements more,
  // in fp32. So the last stage's ranks communicate longest, and tpx-plan prices their traffic.
  const fs::path folder = scratch("plan-ranks");
  const std::int64_t d = 16, vocab = 256;
  const nlohmann::json report = dry_run_report(
      TPX_TRAIN, "--pipeline 2 --mesh 2x1 --batch 16 --d-model 16 --ffn 32 --layers 2 --context 1",
      folder / "pp.json");
  const nlohmann::json& ranks = report.at("ranks");
  REQUIRE(ranks.size() == 4);
  const auto gathered_bytes = [&](int rank) {
    return ranks.at(rank).at("traffic").at("X").at("all_gather").at("data_bytes").get<double>();
  };
  for (const int stage_0_rank : {0, 1})
    for (const int stage_1_rank : {2, 3}) {
      CAPTURE(stage_0_rank);
      CAPTURE(stage_1_rank);
      CHECK(gathered_bytes(stage_1_rank) - gathered_bytes(stage_0_rank) ==
            static_cast<double>((d * vocab + d - vocab * d) * 4));
    }
  const rank_communication longest =
      longest_communication(report, [](const std::string&) { return 1e9; });
  CHECK(longest.rank == 2);

  const fs::path out = folder / "plan.json";
  const command_result r =
      run_command(std::string(TPX_PLAN) + " --reports " + (folder / "pp.json").string() +
                  " --flops 1e12 --link-bw 1e9 --json " + out.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("rank 2: P ") != std::string::npos);
  std::ifstream in(out);
  const nlohmann::json row = nlohmann::json::parse(in).at("rows").at(0);
  CHECK(row.at("comm_rank").get<int>() == 2);
  CHECK(row.at("comm_ms").get<double>() == doctest::Approx(longest.ms).epsilon(1e-12));

  // A report without every rank's traffic, its background tasks' or its timeline (an older
  // tpx's), is refused, naming the file.
  for (const char* key : {"traffic", "background_traffic", "timeline"}) {
    INFO(key);
    nlohmann::json old = report;
    old.at("ranks").at(1).erase(key);
    const fs::path old_file = folder / "old.json";
    std::ofstream(old_file) << old.dump();
    const command_result refused =
        run_command(std::string(TPX_PLAN) + " --reports " + old_file.string());
    CHECK(refused.status != 0);
    CHECK(refused.output.find(old_file.string() + ": not a --dry-run report") != std::string::npos);
    CHECK(refused.output.find(std::string("no ") + key + " of rank 1") != std::string::npos);
  }
}
#endif

#ifdef TPX_PROGRAMS_ON_GPU
TEST_CASE("the CUDA programs answer --help and refuse bad flags with or without a GPU") {
  for (const char* program : {TPX_GPT, TPX_TRAIN}) {
    INFO(program);
    const command_result help = run_command(std::string(program) + " --help");
    INFO(help.output);
    CHECK(help.status == 0);
    CHECK(help.output.find("--dry-run") != std::string::npos);
    CHECK(help.output.find("--backend") != std::string::npos);
    const command_result bad = run_command(std::string(program) + " --mesh 0x2");
    INFO(bad.output);
    CHECK(bad.status != 0);
    CHECK(bad.status != 77);  // refused, not skipped for want of a GPU
    CHECK(bad.output.find("--mesh: expected XxY") != std::string::npos);
  }
}

TEST_CASE("a CUDA program asked to train without a GPU says so and points to --dry-run") {
  for (const char* pipeline : {"", " --pipeline 2 --microbatches 2"}) {
    const command_result r =
        run_command(std::string(TPX_TRAIN) + pipeline +
                    " --mesh 1x1 --steps 2 --batch 8 --d-model 8 --ffn 16 --layers 2 "
                    "--peak-gflops 1");
    INFO(r.output);
    if (r.status == 77) {
      CHECK(r.output.find("no CUDA device") != std::string::npos);
      CHECK(r.output.find("--dry-run sizes this run without one") != std::string::npos);
    } else {  // a machine with a GPU trains
      CHECK(r.status == 0);
      CHECK(r.output.find("| loss") != std::string::npos);
    }
  }
}
#endif

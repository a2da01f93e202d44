// tpx-plan: which layout to train an MLP stack with, on which hardware, before running anything.
//
//   tpx-plan --hardware h100 --mesh 8,8 --layers 80 -d 8192 -f 28672 --batch 64 --seq 4096
//
// For the notes' MLP layer In[B, D] *_D W_in[D, F] *_F W_out[F, D] (cost/mlp.hpp) under DP and
// FSDP over all X*Y devices, TP over all of them, and FSDP over X with TP over Y, it prints what
// tpx would run (the plans tpx::matmul compiles, as sentences), the bytes each device moves, the
// predicted compute and communication time of a training step (forward and backward) per layer
// and for all layers, the memory per device and the MFU ceiling, then recommends the layout
// with the shortest step among those that fit in device memory (the least communication among
// equals): the notes' "four situations" (seed 003) as a tool. The prices come from tpx::cost
// with the named hardware profile, with "this machine" as tpx-bench-matmul-strategies measured
// it (--profile FILE: that bench's --json file, whose settings.profiles hold per-rank FLOP/s,
// memory and link bandwidth for each rank count it ran), or with one given by --flops,
// --memory-bw and --link-bw, which also override the other two; --links gives how many physical
// links carry each mesh axis (a TPU v5p axis spread over several ICI axes). --json FILE writes the
// table, each report's row also with what the printed table has no room for: a pipeline's
// stages, schedule and microbatches, and the dry run's description of its layout and model.
//
//   tpx-plan --hardware h100 --reports 8x1.json 4x2.json 2x4.json --axis-link-bw X=50e9
//
// With --reports, it prices the example trainers' --dry-run reports instead (the exact memory,
// FLOPs and traffic of a step of the real program on each mesh) on the same profile, and
// recommends a mesh (dry_run_reports.hpp).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tpx/cost/bounds.hpp>
#include <vector>

#include "../trainer/cli_checks.hpp"
#include "dry_run_reports.hpp"

namespace {

namespace cost = tpx::cost;
namespace mlp = tpx::cost::mlp;
using cluster_t = cost::cluster<mlp::mesh>;

// The plans of the layer's two products, as tpx prints them.
template <class L>
std::string plan_text() {
  using first = tpx::matmul_plan_t<typename L::in, typename L::w_in>;
  using second = tpx::matmul_plan_t<typename first::result, typename L::w_out>;
  using reduce = tpx::reshard_traits<typename second::result, typename L::out>;
  return std::string("Tmp: ") + first::description.c_str() +
         "  Out: " + second::description.c_str() + (reduce::plan.steps.count ? "  then " : "") +
         (reduce::plan.steps.count ? reduce::description.c_str() : "");
}

std::string plan_text(std::string_view layout) {
  if (layout == "dp") return plan_text<mlp::dp>();
  if (layout == "fsdp") return plan_text<mlp::fsdp>();
  if (layout == "tp") return plan_text<mlp::tp>();
  return plan_text<mlp::fsdp_tp>();
}

// A profile tpx-bench-matmul-strategies measured, read from its --json file: the one measured
// with `ranks` ranks, else the one with the most. The strings live in `name` and `source`,
// which the profile's string_views point into.
cost::hardware_profile load_profile(const std::string& file, int ranks, std::string& name,
                                    std::string& source) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file);
  const nlohmann::json doc = nlohmann::json::parse(in);
  if (doc.value("bench", "") != "matmul_strategies" || !doc.contains("settings") ||
      !doc["settings"].contains("profiles") || doc["settings"]["profiles"].empty())
    throw std::runtime_error(file +
                             ": not a tpx-bench-matmul-strategies --json file with "
                             "settings.profiles");
  const nlohmann::json* chosen = nullptr;
  for (const nlohmann::json& p : doc["settings"]["profiles"])
    if (!chosen || p.at("ranks") == ranks ||
        (chosen->at("ranks") != ranks && p.at("ranks") > chosen->at("ranks")))
      chosen = &p;
  const nlohmann::json& p = *chosen;
  name = p.at("name").get<std::string>();
  source = file + ": " + doc.value("command", std::string("?"));
  return {name,
          p.at("flops").get<double>(),
          p.at("memory_bw").get<double>(),
          p.at("link_bw").get<double>(),
          p.at("memory").get<double>(),
          source};
}

// The mesh each layout uses on x * y devices.
mlp::mesh mesh_for(std::string_view layout, int x, int y) {
  if (layout == "tp") return {1, x * y};
  if (layout == "fsdp_tp") return {x, y};
  return {x * y, 1};
}

// --json FILE: the command, the profile, the recommendation and the table's rows.
void write_json(const std::string& file, int argc, char** argv, const cost::hardware_profile& hw,
                const std::string& recommendation, const nlohmann::json& rows) {
  std::ofstream out(file);
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  const nlohmann::json machine = {{"name", std::string(hw.name)}, {"flops", hw.flops},
                                  {"memory_bw", hw.memory_bw},    {"link_bw", hw.link_bw},
                                  {"memory", hw.memory},          {"source", std::string(hw.source)}};
  out << nlohmann::json{{"bench", "tpx-plan"},
                        {"command", command},
                        {"machine", machine},
                        {"recommendation", recommendation},
                        {"rows", rows}}
             .dump(1)
      << '\n';
  if (!out) throw std::runtime_error("cannot write " + file);
}

}  // namespace

int main(int argc, char** argv) {
  std::string hardware = "h100", json, profile, profile_name, profile_source;
  std::vector<int> mesh_sizes = {8, 1};
  std::vector<double> links = {1, 1};
  double layers = 1, d_model = 8192, d_ff = 28672, batch = 256, seq = 4096, bytes = 2;
  double flops = 0, memory_bw = 0, link_bw = 0, memory = 0;
  CLI::App app{"tpx-plan: predicted cost of DP, FSDP, TP and FSDP+TP for an MLP stack, or of the "
               "example trainers' --dry-run reports (--reports)"};
  CLI::Option* named = app.add_option("--hardware", hardware, "h100, h200, a100 or tpu-v5p")
                           ->check(CLI::IsMember({"h100", "h200", "a100", "tpu-v5p"}));
  app.add_option("--profile", profile,
                 "this machine: a tpx-bench-matmul-strategies --json file (the profile it "
                 "measured with X*Y ranks, else its largest)")
      ->check(CLI::ExistingFile)
      ->excludes(named);
  const CLI::Validator positive = trainer::finite_number(0, trainer::bound::open);
  const std::vector<CLI::Option*> mlp_flags = {
      app.add_option("--mesh", mesh_sizes, "devices along X,Y")
          ->delimiter(',')
          ->expected(2)
          ->transform(trainer::whole_number(1)),
      app.add_option("--links", links, "physical links carrying X,Y")
          ->delimiter(',')
          ->expected(2)
          ->check(positive),
      app.add_option("--layers", layers, "MLP layers")->check(positive),
      app.add_option("-d,--d-model", d_model, "D")->check(positive),
      app.add_option("-f,--d-ff", d_ff, "F")->check(positive),
      app.add_option("--batch", batch, "sequences per global batch")->check(positive),
      app.add_option("--seq", seq, "tokens per sequence")->check(positive),
      app.add_option("--bytes", bytes, "bytes per element (2: bf16)")->check(positive)};
  std::vector<std::string> reports, axis_link_bw;
  CLI::Option* reports_flag =
      app.add_option("--reports", reports,
                     "instead of the MLP layer, price these --dry-run reports of tpx-gpt or "
                     "tpx-train (--dry-run --log FILE) and recommend one")
          ->check(CLI::ExistingFile);
  for (CLI::Option* flag : mlp_flags) reports_flag->excludes(flag);
  app.add_option("--axis-link-bw", axis_link_bw,
                 "with --reports: AXIS=BYTES_PER_S, the link bandwidth of a mesh axis that "
                 "leaves the node (e.g. X=50e9; repeat for more axes)")
      ->needs(reports_flag);
  app.add_option("--flops", flops, "override: FLOP/s per device")->check(positive);
  app.add_option("--memory-bw", memory_bw, "override: memory bytes/s per device")->check(positive);
  app.add_option("--link-bw", link_bw, "override: link bytes/s per device and axis")
      ->check(positive);
  app.add_option("--memory", memory, "override: device memory in bytes")->check(positive);
  app.add_option("--json", json, "write the table as JSON");
  CLI11_PARSE(app, argc, argv);

  try {
    const int x = mesh_sizes[0], y = mesh_sizes[1];
    if (x > std::numeric_limits<int>::max() / y)
      throw std::invalid_argument("--mesh " + std::to_string(x) + "," + std::to_string(y) +
                                  ": more devices than an int counts");
    cost::hardware_profile hw = hardware == "h200"      ? cost::h200
                                : hardware == "a100"    ? cost::a100_sxm
                                : hardware == "tpu-v5p" ? cost::tpu_v5p
                                                        : cost::h100_sxm;
    if (!profile.empty()) hw = load_profile(profile, x * y, profile_name, profile_source);
    if (flops > 0) hw.flops = flops;
    if (memory_bw > 0) hw.memory_bw = memory_bw;
    if (link_bw > 0) hw.link_bw = link_bw;
    if (memory > 0) hw.memory = memory;
    if (!reports.empty()) {
      const std::map<std::string, double> by_axis = plan::parse_axis_link_bw(axis_link_bw);
      std::vector<plan::priced_report> priced;
      for (const std::string& file : reports) priced.push_back(plan::price_report(file, hw, by_axis));
      plan::check_axes_named(priced, by_axis);
      const plan::priced_table table = plan::print_priced_reports(priced, hw);
      if (!json.empty()) write_json(json, argc, argv, hw, table.recommendation, table.rows);
      return 0;
    }
    const mlp::shape shape{batch * seq, d_model, d_ff};

    std::printf(
        "# tpx-plan: %g layers of In[B, D] W_in[D, F] W_out[F, D], B = %g tokens, D = %g, "
        "F = %g, %g-byte elements\n",
        layers, shape.batch, d_model, d_ff, bytes);
    std::printf(
        "# %s: %.3g FLOP/s, %.3g B/s memory, %.3g B/s per link, %.3g B; mesh X=%d Y=%d "
        "(links %g, %g)\n",
        std::string(hw.name).c_str(), hw.flops, hw.memory_bw, hw.link_bw, hw.memory, x, y, links[0],
        links[1]);
    if (!profile.empty()) std::printf("# measured by %s\n", profile_source.c_str());
    const cluster_t over_x{mlp::mesh{x * y, 1}, hw, {links[0], links[1]}, false};
    std::printf(
        "# the notes' bounds from this model: FSDP/DP compute bound above %.0f tokens per "
        "device (here %.0f); TP compute bound up to Y = %d\n",
        mlp::min_tokens_per_device<mlp::fsdp>(over_x, shape, bytes), shape.batch / (x * y),
        mlp::max_compute_bound_degree<mlp::tp>(
            cluster_t{mlp::mesh{1, 1}, hw, {links[0], links[1]}, false}, shape, bytes));
    std::printf("#\n# %-8s %-9s %10s %10s %10s %10s %10s %9s %6s  %s\n", "layout", "mesh",
                "compute", "comm", "step", "all layers", "MiB moved", "memory", "MFU",
                "bound / fits");
    std::printf("# %-8s %-9s %10s %10s %10s %10s %10s %9s %6s\n", "", "", "(ms/layer)",
                "(ms/layer)", "(ms/layer)", "(s)", "per layer", "(GB)", "ceil");

    nlohmann::json rows = nlohmann::json::array();
    std::string best;
    double best_step = std::numeric_limits<double>::infinity(), best_comm = best_step;
    for (std::string_view layout : mlp::layout_names) {
      const mlp::mesh m = mesh_for(layout, x, y);
      const cluster_t sys{m, hw, {links[0], links[1]}};
      const mlp::layer_estimate e = mlp::predict_layer(layout, sys, shape, bytes);
      const cost::op_estimate step = e.step();
      const double memory_gb =
          (e.state_bytes + e.activation_bytes) * layers / 1e9 + e.gathered_bytes / 1e9;
      const bool fits = hw.memory <= 0 || memory_gb * 1e9 <= hw.memory;
      const std::string mesh =
          "X=" + std::to_string(m.size<mlp::X>()) + ",Y=" + std::to_string(m.size<mlp::Y>());
      std::printf("  %-8s %-9s %10.3f %10.3f %10.3f %10.3f %10.1f %9.2f %6.2f  %s, %s\n",
                  std::string(layout).c_str(), mesh.c_str(), step.compute_seconds() * 1e3,
                  step.comm.seconds * 1e3, step.overlapped() * 1e3, step.overlapped() * layers,
                  step.comm.bus_bytes / (1 << 20), memory_gb, e.mfu_ceiling(),
                  step.comm_bound() ? "comm bound" : "compute bound",
                  fits ? "fits" : "does not fit");
      std::printf("  %-8s %s\n", "", plan_text(layout).c_str());
      // The shortest step that fits; between equal steps, the one that communicates less.
      if (fits && (step.overlapped() < best_step ||
                   (step.overlapped() == best_step && step.comm.seconds < best_comm))) {
        best_step = step.overlapped();
        best_comm = step.comm.seconds;
        best = std::string(layout);
      }
      rows.push_back({{"layout", layout},
                      {"mesh", mesh},
                      {"compute_ms", step.compute_seconds() * 1e3},
                      {"comm_ms", step.comm.seconds * 1e3},
                      {"step_ms", step.overlapped() * 1e3},
                      {"forward_comm_ms", e.forward.comm.seconds * 1e3},
                      {"backward_comm_ms", e.backward.comm.seconds * 1e3},
                      {"collectives", step.comm.collectives},
                      {"comm_mib_per_layer", step.comm.bus_bytes / (1 << 20)},
                      {"memory_gb", memory_gb},
                      {"fits", fits},
                      {"mfu_ceiling", e.mfu_ceiling()},
                      {"comm_bound", step.comm_bound()},
                      {"plan", plan_text(layout)}});
    }
    if (best.empty())
      std::printf("# recommendation: none of the layouts fits in %.3g bytes per device\n",
                  hw.memory);
    else
      std::printf("# recommendation: %s (%.3f ms per layer per step, communication overlapped)\n",
                  best.c_str(), best_step * 1e3);
    if (!json.empty()) write_json(json, argc, argv, hw, best, rows);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpx-plan: %s\n", e.what());
    return 2;
  }
}

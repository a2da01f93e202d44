// The definition of dry_run_main<Family> (dry_run.hpp): every rank of the mesh runs
// measure_step_usage (step_usage.hpp) on meta tensors under tpx::spmd(tpx::dry_run, ...), one
// after another, and the report says per rank what the second step took: memory, FLOPs and the
// collectives' traffic, which differ between ranks (a pipeline's first stage gathers the
// embedding, its last the head). Memory is the memory meter's: tensors, not what a GPU process
// also holds (the CUDA context, cuBLASLt's workspace, NCCL's buffers, the pool's slack). The
// traffic is all of the step's and, beside it, the part its background tasks move while the step
// computes (--overlap on: tpx::in_background), which tpx-plan prices as hidden behind the
// products, the rest as not. The FLOPs are those of the products the step runs (recomputation
// under activation checkpointing and attention's masked or repeated products included), beside
// the model FLOPs the progress line's MFU counts.
#pragma once

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tpx/spmd/dry_run.hpp>
#include <vector>

#include "dry_run.hpp"
#include "run_description.hpp"
#include "step_usage.hpp"
#include "training.hpp"

namespace trainer {

namespace detail {

// Bytes in the unit that suits `scale` (KiB below 10 MiB, MiB below 10 GiB, else GiB): its name
// and size.
struct byte_unit {
  const char* name;
  double bytes;
};
inline byte_unit unit_for(double scale) {
  if (scale < 10.0 * (1 << 20)) return {"KiB", 1 << 10};
  if (scale < 10.0 * (1 << 30)) return {"MiB", 1 << 20};
  return {"GiB", 1 << 30};
}
// "1.23 TFLOP"
inline std::string flops_text(double flops) {
  constexpr const char* units[] = {"GFLOP", "TFLOP", "PFLOP", "EFLOP"};
  int unit = 0;
  double value = flops * 1e-9;
  while (unit < 3 && value >= 1000) value /= 1000, ++unit;
  char text[32];
  std::snprintf(text, sizeof text, "%.3f %s", value, units[unit]);
  return text;
}

// "2.6 MiB on every rank", or "2.6 MiB on rank 0, from 2.5 MiB (rank 5) to 2.6 MiB (rank 0)",
// each rank's field as Text makes it.
template <class Field, class Text>
std::string per_rank(const std::vector<step_usage>& ranks, Field field, Text as_text) {
  const auto by_field = [&](const step_usage& a, const step_usage& b) { return field(a) < field(b); };
  const auto [smallest, largest] = std::minmax_element(ranks.begin(), ranks.end(), by_field);
  const auto text = [&](const step_usage& u) { return as_text(static_cast<double>(field(u))); };
  if (field(*smallest) == field(*largest))
    return text(ranks[0]) + (ranks.size() > 1 ? " on every rank" : "");
  return text(ranks[0]) + " on rank 0, from " + text(*smallest) + " (rank " + std::to_string(smallest->rank) +
         ") to " + text(*largest) + " (rank " + std::to_string(largest->rank) + ")";
}
template <class Field>
std::string per_rank_bytes(const std::vector<step_usage>& ranks, Field field) {
  return per_rank(ranks, field, [](double bytes) { return bytes_text(bytes); });
}

inline nlohmann::json traffic_json(const tpx::collective_traffic& t) {
  nlohmann::json out = nlohmann::json::object();
  for (tpx::detail::CollectiveOp op : tpx::collective_traffic::operations) {
    const tpx::traffic_count& c = t.of(op);
    if (c.calls == 0) continue;
    out[std::string(tpx::detail::op_name(op))] = {
        {"calls", c.calls}, {"data_bytes", c.data_bytes}, {"link_bytes", c.link_bytes}};
  }
  return out;
}

// Every rank's usage, from a dry run of the step o describes; prints progress on large meshes.
template <class Family>
std::vector<step_usage> dry_run_ranks(const run_options<Family>& o) {
  const typename Family::mesh mesh = mesh_of(o);
  const text_data data(o.text, Family::context(o.model));
  const int count = mesh.rank_count();
  std::vector<step_usage> ranks;
  tpx::spmd(tpx::dry_run, mesh, [&](auto& rank) {
    ranks.push_back(o.bf16 ? measure_step_usage<tpx::bf16, tpx::meta_space>(rank, o, data)
                           : measure_step_usage<float, tpx::meta_space>(rank, o, data));
    if (count >= 16 && (rank.world_rank() + 1) % (count / 8) == 0) {
      std::printf("  ran %d of %d ranks\n", rank.world_rank() + 1, count);
      std::fflush(stdout);
    }
  });
  return ranks;
}

// The memory and FLOPs lines of the report.
template <class Family>
void print_memory_and_flops(const run_options<Family>& o, const std::vector<step_usage>& ranks,
                            const nlohmann::json& pipeline) {
  std::printf("tensor memory per rank (tpx's memory meter; a GPU process also holds the CUDA context,\n"
              "cuBLASLt's workspace and NCCL's buffers):\n");
  std::printf("  between steps (parameters, gradients, AdamW moments): %s\n",
              per_rank_bytes(ranks, [](const step_usage& u) { return u.state_bytes; }).c_str());
  std::printf("  peak during a step:                                   %s\n",
              per_rank_bytes(ranks, [](const step_usage& u) { return u.peak_bytes; }).c_str());
  double all_flops = 0;
  for (const step_usage& u : ranks) all_flops += u.matrix_flops;
  const double model_flops = Family::flops_per_step(o.model);
  // The busiest rank bounds the step: with context parallelism and the fused attention, the
  // last block of each sequence's queries sees the most keys.
  const std::string per_rank_flops =
      per_rank(ranks, [](const step_usage& u) { return u.matrix_flops; }, flops_text);
  std::printf("matrix FLOPs per step: %s; %s on all ranks, %.2fx the %s of model FLOPs\n", per_rank_flops.c_str(),
              flops_text(all_flops).c_str(), all_flops / model_flops, flops_text(model_flops).c_str());
  if (!pipeline.is_null()) {
    const double bubble = pipeline.at("bubble").get<double>();
    std::printf("pipeline bubble (%s, %d stages, %d microbatches): every stage idles %.1f%% of the step, its\n"
                "  products fill the other %.1f%%\n",
                pipeline.at("schedule").get<std::string>().c_str(), pipeline.at("stages").get<int>(),
                pipeline.at("microbatches").get<int>(), 100 * bubble, 100 * (1 - bubble));
  }
}

// {"X": {"all_gather": {"calls": ..., "data_bytes": ..., "link_bytes": ...}}}: a rank's collectives
// per set of mesh axes (those of more than one rank).
inline nlohmann::json traffic_json(const std::vector<tpx::axes_traffic>& traffic) {
  nlohmann::json json = nlohmann::json::object();
  for (const tpx::axes_traffic& axes : traffic) json[axes.axes] = traffic_json(axes.traffic);
  return json;
}

// {"X": bytes, ...}: what a list of collectives puts on the rank's link per set of mesh axes.
inline nlohmann::json link_bytes_json(const std::vector<tpx::axes_traffic>& traffic) {
  nlohmann::json json = nlohmann::json::object();
  for (const tpx::axes_traffic& axes : traffic)
    if (const double bytes = axes.traffic.total().link_bytes; bytes > 0) json[axes.axes] = bytes;
  return json;
}

// A rank's step in order (tpx::timeline_event), as tpx-plan --reports replays it:
// {"flops": F, "link_bytes": {...}} for the rank's own work, {"start": k, "link_bytes": {...}}
// for background task k and what it moves, {"wait": k} for the wait for it.
inline nlohmann::json timeline_json(const std::vector<tpx::timeline_event>& timeline) {
  nlohmann::json json = nlohmann::json::array();
  for (const tpx::timeline_event& e : timeline) {
    using kind = tpx::timeline_event::kind;
    if (e.what == kind::work)
      json.push_back({{"flops", e.matrix_flops}, {"link_bytes", link_bytes_json(e.traffic)}});
    else if (e.what == kind::start)
      json.push_back({{"start", e.task}, {"link_bytes", link_bytes_json(e.traffic)}});
    else
      json.push_back({{"wait", e.task}});
  }
  return json;
}

// The table of rank 0's collectives per set of mesh axes (those of more than one rank), in the
// unit that suits their total, and, where the ranks' link bytes differ, the least and the most.
inline void print_traffic(const std::vector<step_usage>& ranks) {
  const step_usage& rank_0 = ranks[0];
  struct row {
    std::string axes, collective;
    tpx::traffic_count count, background;
  };
  std::vector<row> rows;
  tpx::traffic_count total, total_background;
  for (std::size_t set = 0; set < rank_0.traffic.size(); ++set) {
    const tpx::axes_traffic& axes = rank_0.traffic[set];
    for (tpx::detail::CollectiveOp op : tpx::collective_traffic::operations) {
      const tpx::traffic_count& t = axes.traffic.of(op);
      if (t.calls == 0) continue;
      const tpx::traffic_count& b = rank_0.background_traffic[set].traffic.of(op);
      rows.push_back({axes.axes, std::string(tpx::detail::op_name(op)), t, b});
      total += t;
      total_background += b;
    }
  }
  std::printf(
      "communication per step of rank 0 (link: what a ring puts on the rank's link, nccl-tests' "
      "bus bytes;\n"
      "in background: the link bytes of the calls its background tasks make beside the "
      "products):\n");
  const byte_unit unit = unit_for(total.data_bytes);
  std::printf("  %-8s %-16s %8s %11s %s %11s %s %9s %s\n", "axes", "collective", "calls", "data",
              unit.name, "link", unit.name, "in background", unit.name);
  if (rows.empty()) {
    std::printf("  none: every axis of this mesh has one rank\n");
    return;
  }
  rows.push_back({"all", "", total, total_background});
  for (const row& r : rows)
    std::printf("  %-8s %-16s %8lld %15.1f %15.1f %17.1f\n", r.axes.c_str(), r.collective.c_str(),
                static_cast<long long>(r.count.calls), r.count.data_bytes / unit.bytes,
                r.count.link_bytes / unit.bytes, r.background.link_bytes / unit.bytes);
  const auto by_link_bytes = [](const step_usage& a, const step_usage& b) {
    return tpx::link_bytes(a.traffic) < tpx::link_bytes(b.traffic);
  };
  const auto least = std::min_element(ranks.begin(), ranks.end(), by_link_bytes);
  const auto most = std::max_element(ranks.begin(), ranks.end(), by_link_bytes);
  const double low = tpx::link_bytes(least->traffic), high = tpx::link_bytes(most->traffic);
  if (low != high)
    std::printf("  the ranks differ: over all axes, from %s (rank %d) to %s (rank %d), %s more\n",
                bytes_text(low).c_str(), least->rank, bytes_text(high).c_str(), most->rank,
                bytes_text(high - low).c_str());
}

}  // namespace detail

template <class Family>
int dry_run_main(const char* program, const command_line<Family>& c) {
  const run_options<Family>& o = c.training;
  try {
    std::ofstream log;
    if (!c.log_path.empty()) log = open_log(c.log_path, o.text);
    std::printf("%s --dry-run: %s, %s\n", program, layout_text(o).c_str(), model_text(o).c_str());
    if (const std::string idle = idle_ranks_text(o); !idle.empty())
      std::printf("%s --dry-run: note: %s\n", program, idle.c_str());
    std::fflush(stdout);
    const std::vector<step_usage> ranks = detail::dry_run_ranks(o);
    std::printf("Nothing was computed or moved: %s ran two training steps on meta tensors (shapes\n"
                "without values) and communicators that only count; the figures are of the second step.\n",
                ranks.size() == 1 ? "the one rank" : ("each of the " + std::to_string(ranks.size()) + " ranks").c_str());
    nlohmann::json pipeline;  // null without a pipeline
    if constexpr (requires { Family::pipeline(o.model); }) pipeline = Family::pipeline(o.model);
    detail::print_memory_and_flops(o, ranks, pipeline);
    detail::print_traffic(ranks);
    if (log.is_open()) {
      nlohmann::json out = {{"dry_run", true},
                            {"program", program},
                            {"mesh", mesh_text(o)},
                            // The run's first line: the layout and attention, which "model" (the
                            // shape a checkpoint records) leaves out.
                            {"description", layout_text(o) + ", " + model_text(o)},
                            {"bf16", o.bf16},
                            {"model", Family::shape(o.model)},
                            {"checkpoint_every", o.model.checkpoint_every},
                            {"model_flops", Family::flops_per_step(o.model)}};
      if (!pipeline.is_null()) out["pipeline"] = pipeline;
      for (const step_usage& u : ranks)
        out["ranks"].push_back({{"rank", u.rank},
                                {"state_bytes", u.state_bytes},
                                {"peak_bytes", u.peak_bytes},
                                {"matrix_flops", u.matrix_flops},
                                {"traffic", detail::traffic_json(u.traffic)},
                                {"background_traffic", detail::traffic_json(u.background_traffic)},
                                {"timeline", detail::timeline_json(u.timeline)}});
      log << out.dump() << "\n" << std::flush;
      if (!log) throw std::runtime_error("cannot write the log " + c.log_path);
      std::printf("log: %s\n", c.log_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
  return 0;
}

}  // namespace trainer

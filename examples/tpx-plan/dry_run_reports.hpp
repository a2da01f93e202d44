// tpx-plan --reports: the example trainers' dry runs priced on a hardware profile. A --dry-run
// report (`tpx-gpt --dry-run --mesh 4x2 ... --log 4x2.json`: examples/trainer/dry_run_main.hpp)
// holds the exact counts of one training step of the real program on every rank: tensor memory,
// the FLOPs of its matrix products, its link bytes per set of mesh axes, which of those its
// background tasks move (tpx::in_background, with --overlap on: FSDP's gathers and reduce-scatters,
// a pipeline's passes between stages), and the rank's timeline, the order of it all
// (tpx/spmd/dry_run_timeline.hpp). This prices them: each rank's products at the profile's FLOP/s
// (a pipeline's, tpx-train --pipeline, spread over the share of the step its schedule keeps each
// stage busy: the bubble's ticks are idle), its link bytes per set of axes at its link bandwidth
// (the profile's, or --axis-link-bw's for an axis that leaves the node; a set of several axes at
// its slowest), and its step as the program runs it, by replaying the timeline: the rank's
// products and its own collectives one after another, its background tasks one after another
// beside them, each from the later of its start and the end of the task before, and the rank
// waiting where the program waits for a task that has not ended. So a task hides only behind the
// work the program does between its start and the wait for it (one block's products, for a
// prefetch one block ahead; the first microbatch's, for a pipeline's gathers at the start of the
// step). The step is the slowest rank's. Beside it, the two bounds: every collective hidden behind
// the products (the longer of the busiest rank's products and the longest communication) and none
// (their sum). The MFU ceiling is the model FLOPs per device over the profile's FLOP/s and the
// step; the recommendation is the report whose mesh trains fastest, the most model FLOPs per
// second of the whole mesh (for one model and batch: the shortest step), among those whose
// largest rank's tensors fit in device memory. These are the cost model's figures from the
// profile's peaks, not measurements: a kernel below peak, a collective below its bus bandwidth,
// or a background task sharing a link with the rank's own collectives (the replay gives each its
// own) makes a real step longer.
#pragma once

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <tpx/cost/hardware.hpp>
#include <utility>
#include <vector>

namespace plan {

// One set of axes' communication on a rank, in seconds: all of it, and what background tasks
// moved.
struct axes_seconds {
  std::string axes;
  double seconds = 0, background_seconds = 0;
};

// One report, priced.
struct priced_report {
  std::string file, program, mesh;
  std::string description;  // the dry run's: its layout and model, as its first line gives them
  bool bf16 = false;
  int ranks = 0;
  double peak_bytes = 0;  // the largest rank's, tensors only
  bool fits = false;
  double compute_seconds = 0;  // the busiest rank's products
  double bubble = 0;           // a pipeline's: the share of the step each stage idles
  std::string pipeline;        // a pipeline's settings, "2 stages, 1f1b, 8 microbatches"
  std::vector<axes_seconds> comm_seconds;                      // comm_rank's, per set of axes
  double comm_total_seconds = 0, comm_background_seconds = 0;  // comm_rank's
  int comm_rank = 0;  // the rank that communicates longest
  double step_seconds = 0;  // as the program overlaps: the slowest rank's
  int step_rank = 0;        // that rank
  double step_all_hidden_seconds = 0, step_serial_seconds = 0;  // the bounds
  double mfu_ceiling = 0;
  double model_flops = 0;      // of a step, on all ranks
  std::set<std::string> axes;  // the mesh's axes in sets of more than one rank
};

// The axes of a set as the report names it: "X, Y" -> {"X", "Y"}.
inline std::vector<std::string> axes_in(const std::string& set) {
  std::vector<std::string> axes;
  for (std::size_t begin = 0; begin < set.size();) {
    const std::size_t end = std::min(set.find(", ", begin), set.size());
    axes.push_back(set.substr(begin, end - begin));
    begin = end + 2;
  }
  return axes;
}

// The link bandwidth of a set of axes ("X, Y"): its slowest axis's, each the profile's unless
// `axis_link_bw` names it.
inline double link_bandwidth(const std::string& set, const tpx::cost::hardware_profile& hw,
                             const std::map<std::string, double>& axis_link_bw) {
  double slowest = hw.link_bw;
  for (const std::string& axis : axes_in(set)) {
    const auto named = axis_link_bw.find(axis);
    if (named != axis_link_bw.end()) slowest = std::min(slowest, named->second);
  }
  return slowest;
}

// The report in `file`, read; throws std::runtime_error naming the file when it is not JSON or
// not a dry-run report.
inline nlohmann::json read_report(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file);
  try {
    nlohmann::json report = nlohmann::json::parse(in);
    if (!report.is_object() || report.value("dry_run", false) != true ||
        !report.contains("ranks") || report.at("ranks").empty())
      throw std::runtime_error("no dry run's figures");
    for (const nlohmann::json& rank : report.at("ranks"))
      for (const char* part : {"traffic", "background_traffic", "timeline"})
        if (!rank.contains(part))
          throw std::runtime_error(std::string("no ") + part + " of rank " +
                                   rank.value("rank", nlohmann::json()).dump() +
                                   " (a report of an older tpx: run the --dry-run again)");
    return report;
  } catch (const std::exception& e) {
    throw std::runtime_error(file + ": not a --dry-run report of tpx-gpt or tpx-train (--dry-run --log FILE "
                             "writes one): " + e.what());
  }
}

// A rank's step from its timeline (a --dry-run report's, in order: {"flops": F, "link_bytes":
// {...}} the rank's own work, {"start": k, "link_bytes": {...}} background task k, {"wait": k}),
// its products at `flops_rate` FLOP/s and link bytes at link_time(link_bytes) seconds: the rank
// works and communicates in turn, its tasks run in the order they started on one lane, each from
// the later of its start and the end of the task before, and a wait lasts until the task's end.
// The step ends when both the rank and the lane are done.
template <class LinkTime>
double replayed_step(const nlohmann::json& timeline, double flops_rate, const LinkTime& link_time) {
  double rank_time = 0, lane_free = 0;
  std::map<int, double> ends;  // each task's
  for (const nlohmann::json& event : timeline) {
    if (event.contains("start")) {
      lane_free = std::max(rank_time, lane_free) + link_time(event.at("link_bytes"));
      ends[event.at("start").get<int>()] = lane_free;
    } else if (event.contains("wait")) {
      const auto end = ends.find(event.at("wait").get<int>());
      if (end == ends.end())  // appended, not `"..." + std::string`: GCC 12's -Wrestrict at -O3
        throw std::runtime_error(std::string("a wait for task ")
                                     .append(event.at("wait").dump())
                                     .append(", which the timeline does not start before it"));
      rank_time = std::max(rank_time, end->second);
    } else {
      rank_time += event.at("flops").get<double>() / flops_rate + link_time(event.at("link_bytes"));
    }
  }
  return std::max(rank_time, lane_free);
}

// The report in `file`, priced on hw; throws std::runtime_error naming the file when it is not
// a dry-run report.
inline priced_report price_report(const std::string& file, const tpx::cost::hardware_profile& hw,
                                  const std::map<std::string, double>& axis_link_bw) {
  const nlohmann::json report = read_report(file);
  priced_report p;
  p.file = file;
  p.program = report.at("program").get<std::string>();
  p.mesh = report.at("mesh").get<std::string>();
  p.description = report.value("description", std::string());
  p.bf16 = report.at("bf16").get<bool>();
  const nlohmann::json& ranks = report.at("ranks");
  p.ranks = static_cast<int>(ranks.size());
  for (const nlohmann::json& r : ranks)
    p.peak_bytes = std::max(p.peak_bytes, r.at("peak_bytes").get<double>());
  p.fits = hw.memory <= 0 || p.peak_bytes <= hw.memory;
  if (report.contains("pipeline")) {
    const nlohmann::json& pipeline = report.at("pipeline");
    p.bubble = pipeline.at("bubble").get<double>();
    if (!(p.bubble >= 0 && p.bubble < 1))
      throw std::runtime_error(file + ": a pipeline's bubble of " + std::to_string(p.bubble) +
                               " (expected a share of the step from 0 up to 1)");
    const std::string stages = std::to_string(pipeline.at("stages").get<int>());
    p.pipeline = stages + " stages, " + pipeline.at("schedule").get<std::string>() + ", " +
                 std::to_string(pipeline.at("microbatches").get<int>()) + " microbatches";
    p.mesh += " P=" + stages;  // --mesh XxY, and --pipeline P
  }
  // The link seconds of a rank's collectives per set of axes.
  const auto link_seconds = [&](const nlohmann::json& traffic, const std::string& axes) {
    double link_bytes = 0;
    if (traffic.contains(axes))
      for (const nlohmann::json& c : traffic.at(axes))
        link_bytes += c.at("link_bytes").get<double>();
    return link_bytes / link_bandwidth(axes, hw, axis_link_bw);
  };
  // The link seconds of a timeline event's {"X": bytes, ...}.
  const auto link_time = [&](const nlohmann::json& link_bytes) {
    double seconds = 0;
    for (auto set = link_bytes.begin(); set != link_bytes.end(); ++set)
      seconds += set.value().get<double>() / link_bandwidth(set.key(), hw, axis_link_bw);
    return seconds;
  };
  for (const nlohmann::json& rank : ranks) {
    const double compute = rank.at("matrix_flops").get<double>() / hw.flops / (1 - p.bubble);
    std::vector<axes_seconds> comm_seconds;
    double total = 0, background = 0;
    const nlohmann::json& traffic = rank.at("traffic");
    for (auto set = traffic.begin(); set != traffic.end(); ++set) {
      for (const std::string& axis : axes_in(set.key())) p.axes.insert(axis);
      const axes_seconds seconds{set.key(), link_seconds(traffic, set.key()),
                                 link_seconds(rank.at("background_traffic"), set.key())};
      if (seconds.seconds == 0) continue;  // a set of axes the step reduces nothing over
      comm_seconds.push_back(seconds);
      total += seconds.seconds;
      background += seconds.background_seconds;
    }
    const bool first = &rank == &ranks.front();
    const int index = rank.at("rank").get<int>();
    p.compute_seconds = std::max(p.compute_seconds, compute);
    if (first || total > p.comm_total_seconds) {
      p.comm_seconds = std::move(comm_seconds);
      p.comm_total_seconds = total;
      p.comm_background_seconds = background;
      p.comm_rank = index;
    }
    double step = 0;
    try {
      step = replayed_step(rank.at("timeline"), hw.flops * (1 - p.bubble), link_time);
    } catch (const std::exception& e) {
      throw std::runtime_error(file + ": rank " + std::to_string(index) +
                               "'s timeline: " + e.what());
    }
    if (first || step > p.step_seconds) {
      p.step_seconds = step;
      p.step_rank = index;
    }
  }
  p.step_all_hidden_seconds = std::max(p.compute_seconds, p.comm_total_seconds);
  p.step_serial_seconds = p.compute_seconds + p.comm_total_seconds;
  p.model_flops = report.at("model_flops").get<double>();
  p.mfu_ceiling = p.model_flops / p.ranks / hw.flops / p.step_seconds;
  return p;
}

// --axis-link-bw's values, "X=50e9" (bytes/s), by axis; throws std::invalid_argument with the
// sentence for the user when one is not NAME=a finite number > 0.
inline std::map<std::string, double> parse_axis_link_bw(const std::vector<std::string>& values) {
  std::map<std::string, double> by_axis;
  for (const std::string& v : values) {
    const std::size_t equals = v.find('=');
    double bandwidth = 0;
    std::size_t used = 0;
    try {
      if (equals != std::string::npos && equals > 0) bandwidth = std::stod(v.substr(equals + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || equals + 1 + used != v.size() || !(bandwidth > 0) || bandwidth > 1e300)
      throw std::invalid_argument("--axis-link-bw: expected AXIS=BYTES_PER_S with a finite number > 0, "
                                  "e.g. X=50e9; got '" + v + "'");
    by_axis[v.substr(0, equals)] = bandwidth;
  }
  return by_axis;
}

// Throws std::invalid_argument when an axis --axis-link-bw names is on no report's mesh.
inline void check_axes_named(const std::vector<priced_report>& reports,
                             const std::map<std::string, double>& axis_link_bw) {
  std::set<std::string> axes;
  for (const priced_report& p : reports) axes.insert(p.axes.begin(), p.axes.end());
  for (const auto& [axis, bandwidth] : axis_link_bw) {
    (void)bandwidth;
    if (axes.contains(axis)) continue;
    std::string known;
    for (const std::string& a : axes) known += (known.empty() ? "" : ", ") + a;
    throw std::invalid_argument("--axis-link-bw " + axis + ": no report's mesh has an axis " + axis +
                                " of more than one rank (theirs: " + (known.empty() ? "none" : known) + ")");
  }
}

// The reports priced on hw, as a table and JSON rows, and the recommendation (a report's file;
// empty when none fits).
struct priced_table {
  nlohmann::json rows;
  std::string recommendation;
};

// Prints the table of the reports priced on hw and the recommendation.
inline priced_table print_priced_reports(const std::vector<priced_report>& reports,
                                           const tpx::cost::hardware_profile& hw) {
  std::printf("# tpx-plan: %zu dry-run report(s) priced on %s: %.3g FLOP/s, %.3g B/s per link, "
              "%.3g B of memory per device\n",
              reports.size(), std::string(hw.name).c_str(), hw.flops, hw.link_bw, hw.memory);
  std::printf("# bounds from the profile's peaks, not measurements; memory is tensors only (a GPU\n"
              "# process also holds the CUDA context, cuBLASLt's workspace and NCCL's buffers)\n");
  std::string fp32_files;  // one line for them all: a sweep prices dozens of reports
  std::size_t fp32_count = 0;
  for (const priced_report& p : reports)
    if (!p.bf16) {
      fp32_files.append(fp32_count++ == 0 ? "" : ", ").append(p.file);
    }
  if (fp32_count > 0)
    std::printf("# %s fp32: the profile's FLOP/s is its bf16 peak; give --flops for fp32\n",
                fp32_count == reports.size() && fp32_count > 1
                    ? "every report is"
                    : (fp32_files + (fp32_count == 1 ? " is" : " are")).c_str());
  const bool pipelines = std::any_of(reports.begin(), reports.end(),
                                     [](const priced_report& p) { return !p.pipeline.empty(); });
  if (pipelines)
    std::printf(
        "# bubble: the share of a pipeline's step its stages idle in its schedule (1F1B's\n"
        "# (P - 1) / (M + P - 1)), counted in its compute time\n");
  for (const priced_report& p : reports)
    if (p.mfu_ceiling > 1) {
      std::printf("# a ceiling above 100%%: the model FLOPs (the trainers' MFU: 6 per parameter\n"
                  "# and token, plus attention's whole T x T) count the masked half the fused\n"
                  "# attention skips\n");
      break;
    }
  std::printf(
      "# step: each rank's dry-run timeline replayed, its products and own collectives in turn,\n"
      "# its background tasks' collectives (bg) beside them, waited for where the program waits;\n"
      "# the slowest rank's; exposed: the step less the products\n");
  int file_width = 14;  // the report column: as wide as the longest file name
  for (const priced_report& p : reports)
    file_width = std::max(file_width, static_cast<int>(p.file.size()));
  std::printf("#\n# %-*s %-9s %6s %10s %11s %11s %11s %11s %6s%s  %s\n", file_width, "report",
              "mesh", "ranks", "peak GiB", "compute ms", "comm ms", "exposed ms", "step ms", "MFU",
              pipelines ? "  bubble" : "",
              "communication per set of axes (ms; bg: in background tasks) of the rank that "
              "communicates longest");
  priced_table table{nlohmann::json::array(), ""};
  const priced_report* best = nullptr;
  for (const priced_report& p : reports) {
    std::string axes_text;  // "X 0.123 (0.123 bg), Y 0.456"
    nlohmann::json comm = nlohmann::json::object(), background = nlohmann::json::object();
    for (const axes_seconds& a : p.comm_seconds) {
      char part[96];
      std::snprintf(part, sizeof part, "%s%s %.3f", axes_text.empty() ? "" : ", ", a.axes.c_str(),
                    a.seconds * 1e3);
      axes_text += part;
      if (a.background_seconds > 0) {
        std::snprintf(part, sizeof part, " (%.3f bg)", a.background_seconds * 1e3);
        axes_text += part;
      }
      comm[a.axes] = a.seconds * 1e3;
      background[a.axes] = a.background_seconds * 1e3;
    }
    if (axes_text.empty())
      axes_text = "none";
    else if (p.comm_rank != 0)
      axes_text = "rank " + std::to_string(p.comm_rank) + ": " + axes_text;
    char bubble[16] = "";  // "   20.0%", or "       -" for a report without stages
    if (pipelines && p.pipeline.empty())
      std::snprintf(bubble, sizeof bubble, "  %6s", "-");
    else if (pipelines)
      std::snprintf(bubble, sizeof bubble, "  %5.1f%%", 100 * p.bubble);
    std::printf("  %-*s %-9s %6d %10.2f %11.3f %11.3f %11.3f %11.3f %5.1f%%%s  %s%s\n", file_width,
                p.file.c_str(), p.mesh.c_str(), p.ranks, p.peak_bytes / (1 << 30),
                p.compute_seconds * 1e3, p.comm_total_seconds * 1e3,
                (p.step_seconds - p.compute_seconds) * 1e3, p.step_seconds * 1e3,
                100 * p.mfu_ceiling, bubble, axes_text.c_str(), p.fits ? "" : "; does not fit");
    const auto rate = [](const priced_report& r) { return r.model_flops / r.step_seconds; };
    if (p.fits && (!best || rate(p) > rate(*best))) best = &p;
    table.rows.push_back(
        {{"report", p.file},
         {"program", p.program},
         {"mesh", p.mesh},
         {"ranks", p.ranks},
         {"peak_bytes", p.peak_bytes},
         {"fits", p.fits},
         {"compute_ms", p.compute_seconds * 1e3},
         {"bubble", p.bubble},
         {"pipeline", p.pipeline.empty() ? nlohmann::json() : nlohmann::json(p.pipeline)},
         {"description", p.description},
         {"comm_ms", p.comm_total_seconds * 1e3},
         {"comm_background_ms", p.comm_background_seconds * 1e3},
         {"comm_ms_by_axes", comm},
         {"comm_background_ms_by_axes", background},
         {"comm_rank", p.comm_rank},
         {"step_ms", p.step_seconds * 1e3},
         {"exposed_ms", (p.step_seconds - p.compute_seconds) * 1e3},
         {"step_rank", p.step_rank},
         {"step_ms_all_hidden", p.step_all_hidden_seconds * 1e3},
         {"step_ms_without_overlap", p.step_serial_seconds * 1e3},
         {"mfu_ceiling", p.mfu_ceiling}});
  }
  if (best) {
    table.recommendation = best->file;
    std::printf(
        "# recommendation: %s (mesh %s, the fastest that fits: %.3g model FLOP/s over its %d "
        "devices, a step of %.3f ms; %.3f with every collective hidden, %.3f with none)\n",
        best->file.c_str(), best->mesh.c_str(), best->model_flops / best->step_seconds, best->ranks,
        best->step_seconds * 1e3, best->step_all_hidden_seconds * 1e3,
        best->step_serial_seconds * 1e3);
  } else {
    std::printf("# recommendation: none of the reports fits in %.3g bytes per device\n", hw.memory);
  }
  return table;
}

}  // namespace plan

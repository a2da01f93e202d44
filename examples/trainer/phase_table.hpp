// The table --profile-phases prints after the last step: rank 0's phases (tpx::phase_timing), the
// heaviest first, in milliseconds per step and as shares of the step's wall time, and what no
// phase holds (the reports between steps; on a GPU, the stream idle between a phase's end and the
// next mark). The same figures go to the last line of the JSONL log (--log), for scripts:
//   "phase_steps": 11, "phase_ms_per_step": 73.2, "phases": [{"name": "attention backward",
//   "ms_per_step": 14.1, "marks_per_step": 12}, ...]   (in the order the step first marks them)
#pragma once

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "training.hpp"

namespace trainer {

inline void print_phase_table(std::FILE* out, const step_report& r) {
  if (r.phase_steps <= 0) return;
  std::vector<tpx::phase_time> phases = r.phases;
  std::sort(phases.begin(), phases.end(),
            [](const tpx::phase_time& a, const tpx::phase_time& b) { return a.seconds > b.seconds; });
  const double steps = r.phase_steps;
  const double step_ms = r.phase_wall_seconds / steps * 1e3;
  std::fprintf(out, "phases of rank 0's step, mean of the last %d steps (%.3f ms each):\n",
               r.phase_steps, step_ms);
  std::fprintf(out, "  %-28s %10s %7s %11s\n", "phase", "ms/step", "share", "marks/step");
  double in_phases = 0;
  for (const tpx::phase_time& p : phases) {
    const double ms = p.seconds / steps * 1e3;
    in_phases += ms;
    std::fprintf(out, "  %-28s %10.3f %6.1f%% %11.1f\n", p.name.c_str(), ms, 100 * ms / step_ms,
                 static_cast<double>(p.count) / steps);
  }
  std::fprintf(out, "  %-28s %10.3f %6.1f%%\n", "(in no phase)", step_ms - in_phases,
               100 * (step_ms - in_phases) / step_ms);
  std::fflush(out);
}

// The log's fields for the report's phases, from ", " on; empty when it has none.
inline std::string phase_log_fields(const step_report& r) {
  if (r.phase_steps <= 0) return "";
  const double steps = r.phase_steps;
  nlohmann::ordered_json phases = nlohmann::ordered_json::array();
  for (const tpx::phase_time& p : r.phases)
    phases.push_back({{"name", p.name},
                      {"ms_per_step", p.seconds / steps * 1e3},
                      {"marks_per_step", static_cast<double>(p.count) / steps}});
  return ", \"phase_steps\": " + std::to_string(r.phase_steps) +
         ", \"phase_ms_per_step\": " + nlohmann::json(r.phase_wall_seconds / steps * 1e3).dump() +
         ", \"phases\": " + phases.dump();
}

}  // namespace trainer

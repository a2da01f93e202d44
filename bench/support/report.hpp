// What every tpx bench records besides its own numbers: the clock, summaries of repeated
// timings, the machine it ran on and the command that ran it, and the --json file.
//
// Each bench writes one JSON object: {"bench": name, "command": "...", "machine": {...},
// "settings": {...}, "rows": [...]}, one row per line of its table, so that
// tpx-bench-check-json (check_json.cpp) can validate any of them and the plot scripts can read
// them. "machine" names the CPU model, the cores this process may run on, the memory and the
// load average when the run ended, read from /proc on Linux, so that a figure is never quoted
// without the machine, and how busy it was, that produced it.
#pragma once

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpx::bench {

using clock = std::chrono::steady_clock;

inline double seconds_since(clock::time_point start) {
  return std::chrono::duration<double>(clock::now() - start).count();
}

// Summaries of repeated timings of one thing, in seconds.
struct samples {
  std::vector<double> seconds;

  double best() const { return *std::ranges::min_element(seconds); }
  double median() const {
    std::vector<double> sorted = seconds;
    std::ranges::sort(sorted);
    const std::size_t n = sorted.size();
    return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  }
};

// The value of "key:" in a /proc file such as /proc/meminfo ("MemAvailable:  123 kB" -> "123
// kB"), or "" when the file or the key is missing.
inline std::string proc_field(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

// Bytes of memory the kernel expects to be able to give this process (MemAvailable), or the
// physical memory when /proc/meminfo is missing.
inline std::int64_t available_memory() {
  const std::string kb = proc_field("/proc/meminfo", "MemAvailable");
  if (!kb.empty()) return std::stoll(kb) * 1024;
  return static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
}

// The cores this process may run on (its affinity mask), which is what its threads share.
inline int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
}

// The 1-minute load average: how many threads wanted a core lately. Above the bench's own
// threads it means other work shared the cores and the timings are pessimistic.
inline double load_average() {
  double load[1] = {-1};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

inline nlohmann::json machine() {
  return {{"cpu", proc_field("/proc/cpuinfo", "model name")},
          {"cores", usable_cores()},
          {"load_average_at_end", load_average()},
          {"memory_bytes",
           static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE)}};
}

inline std::string command_line(int argc, char** argv) {
  std::string text;
  for (int i = 0; i < argc; ++i) {
    if (i) text += ' ';
    text += argv[i];  // appended, not `" " + std::string(...)`: GCC 12 -O3 -Wrestrict
  }
  return text;
}

// {"bench": name, "command": ..., "machine": ..., "rows": rows} written to path (pretty).
inline void write_json(const std::string& path, const std::string& bench,
                       const std::string& command, nlohmann::json settings, nlohmann::json rows) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  const nlohmann::json doc = {{"bench", bench},
                              {"command", command},
                              {"machine", machine()},
                              {"settings", std::move(settings)},
                              {"rows", std::move(rows)}};
  out << doc.dump(1) << '\n';
  if (!out) throw std::runtime_error("error writing " + path);
}

}  // namespace tpx::bench

// Byte sizes as nccl-tests writes them on its command line and in its tables.
//
// `-b 1K -e 256M -f 2` means 1 KiB to 256 MiB, doubling: a suffix K, M or G (either case, an
// optional trailing B or iB) multiplies by 1024, 1024^2 or 1024^3. parse_bytes throws
// std::invalid_argument with the offending text, which CLI11 reports as a bad option value.
// The sweep is min, min*f, min*f^2, ... while <= max (nccl-tests' -f).
#pragma once

#include <cctype>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpx::bench {

// "256M" -> 268435456. Plain digits are bytes.
inline std::int64_t parse_bytes(const std::string& text) {
  std::size_t end = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &end);
  } catch (const std::exception&) {
    throw std::invalid_argument("not a byte size: '" + text + "' (use e.g. 4096, 1K, 256M, 1G)");
  }
  std::string suffix;
  for (char c : text.substr(end)) suffix += static_cast<char>(std::toupper(c));
  std::int64_t scale = 1;
  if (!suffix.empty()) {
    const char unit = suffix[0];
    scale = unit == 'K' ? 1LL << 10 : unit == 'M' ? 1LL << 20 : unit == 'G' ? 1LL << 30 : 0;
    const std::string rest = suffix.substr(1);
    if (scale == 0 || !(rest.empty() || rest == "B" || rest == "IB"))
      throw std::invalid_argument("not a byte size: '" + text + "' (suffixes: K, M, G)");
  }
  if (value < 0) throw std::invalid_argument("negative byte size: '" + text + "'");
  return value * scale;
}

// 268435456 -> "256M"; sizes that are not whole K/M/G print as plain bytes.
inline std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"G", "M", "K"};
  const int shifts[] = {30, 20, 10};
  for (int i = 0; i < 3; ++i) {
    const std::int64_t unit = std::int64_t{1} << shifts[i];
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + units[i];
  }
  return std::to_string(bytes);
}

// min, min*factor, min*factor^2, ... <= max (factor > 1).
inline std::vector<std::int64_t> size_sweep(std::int64_t min, std::int64_t max, double factor) {
  if (min < 1 || max < min)
    throw std::invalid_argument("the sweep needs 1 <= min <= max (got " + std::to_string(min) +
                                " and " + std::to_string(max) + ")");
  if (factor <= 1.0) throw std::invalid_argument("the step factor must be > 1");
  std::vector<std::int64_t> sizes;
  for (double s = static_cast<double>(min); s <= static_cast<double>(max); s *= factor)
    sizes.push_back(static_cast<std::int64_t>(s));
  return sizes;
}

}  // namespace tpx::bench

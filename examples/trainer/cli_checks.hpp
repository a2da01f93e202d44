// The checks the example trainers' command line (command_line.hpp) and tpx-plan put on numeric
// flags, as CLI11 validators with messages that say what was expected: CLI11's own
// PositiveNumber answers `--steps abc` with "Value abc not in range 0.000000 to 1.797693e+308",
// and a float flag takes nan, inf and 1e39 (which overflows float to inf) without a word.
//
//   whole_number<int>(1)            1, 2, ... up to INT_MAX: rejects abc, 0, 1.5, 2^31, -1
//   finite_number(0, bound::open)   a finite float > 0: rejects nan, inf, 1e39, 0, -1
//   path("a folder")                any text but the empty one, which would silently mean "no
//                                   folder" to the trainer (`--ckpt-dir ''` wrote no checkpoints,
//                                   and with --resume failed mid-start)
//
// whole_number goes on an option with ->transform(), not ->check(): it rewrites the text as the
// decimal number it accepted, which is what CLI11 then converts. CLI11 reads integers with
// strtoll's base 0, so without it `--steps 010` trained 8 steps and `--steps 08` failed as "Could
// not convert" (found by tests/fuzz/trainer_cli_fuzz.cpp). finite_number needs no rewrite: the
// decimal text from_chars accepts is read by CLI11's strtold as the same number.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace trainer {

// A whole number of type T from `min` to T's largest value, written in decimal (leading zeros
// allowed); rewrites the text as that number (use with ->transform(), see the top).
template <class T>
CLI::Validator whole_number(T min) {
  const std::string range =
      std::to_string(min) + " to " + std::to_string(std::numeric_limits<T>::max());
  return CLI::Validator(
      [min, range](std::string& text) -> std::string {
        T value{};
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc() && stop == end && value >= min) {
          text = std::to_string(value);
          return {};
        }
        return "expected a whole number from " + range + ", got '" + text + "'";
      },
      "INT in " + range);
}

// A whole number of type T from `min`, or one of the words `words` ("sqrt").
template <class T>
CLI::Validator whole_number_or(T min, const std::vector<std::string>& words) {
  const CLI::Validator number = whole_number(min);
  std::string alternatives;
  for (const std::string& w : words) alternatives += " or " + w;
  return CLI::Validator(
      [number, words, alternatives](std::string& text) -> std::string {
        for (const std::string& w : words)
          if (text == w) return {};
        std::string message = number(text);
        if (message.empty()) return {};
        return message.insert(message.find(", got"), alternatives);
      },
      number.get_description() + alternatives);
}

enum class bound { closed, open };  // whether `min` itself is allowed

// A finite number (as float, the type the trainer keeps it in) from `min` on.
inline CLI::Validator finite_number(float min, bound b) {
  std::ostringstream range_text;
  range_text << (b == bound::open ? "> " : ">= ") << min;
  const std::string range = range_text.str();
  return CLI::Validator(
      [min, b, range](std::string& text) -> std::string {
        float value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        const bool in_range = b == bound::open ? value > min : value >= min;
        if (error == std::errc() && stop == end && std::isfinite(value) && in_range) return {};
        return "expected a finite number " + range + ", got '" + text + "'";
      },
      "NUMBER " + range);
}

// A path: any text but the empty one; `what` says of what ("a folder").
inline CLI::Validator path(const std::string& what) {
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        return text.empty() ? "expected the path of " + what + ", got ''" : std::string();
      },
      "");  // no description: --help says TEXT, as before
}

}  // namespace trainer

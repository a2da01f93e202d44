// The checks the example trainers' command line (cli.hpp) puts on numeric flags, as CLI11
// validators with messages that say what was expected: CLI11's own PositiveNumber answers
// `--steps abc` with "Value abc not in range 0.000000 to 1.797693e+308", and a float flag takes
// nan, inf and 1e39 (which overflows float to inf) without a word.
//
//   whole_number<int>(1)            1, 2, ... up to INT_MAX: rejects abc, 0, 1.5, 2^31, -1
//   finite_number(0, bound::open)   a finite float > 0: rejects nan, inf, 1e39, 0, -1
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace trainer {

// A whole number of type T from `min` to T's largest value, written in decimal.
template <class T>
CLI::Validator whole_number(T min) {
  const std::string range =
      std::to_string(min) + " to " + std::to_string(std::numeric_limits<T>::max());
  return CLI::Validator(
      [min, range](std::string& text) -> std::string {
        T value{};
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc() && stop == end && value >= min) return {};
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

}  // namespace trainer

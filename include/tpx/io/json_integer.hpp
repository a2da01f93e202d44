// json_integer: a whole number read from JSON that tpx did not write itself, or that may have
// been edited since: a checkpoint's manifest, the state a trainer saved in it.
//
//   const auto bytes = tpx::io::json_integer<std::uint64_t>(f.at("bytes"), "file size", path);
//
// nlohmann's get<Integer>() converts whatever number it finds with a static_cast, so 1e300, or
// 2.5, or -1 where a size belongs, becomes some integer, and a float out of the integer's range
// is undefined behaviour. Here a value that is not an integer, or one the type cannot hold, is
// an io_error naming the file, what the value is and what was expected.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tpx/io/io_error.hpp"

namespace tpx::io {

template <class Integer>
Integer json_integer(const nlohmann::json& value, const std::string& what,
                     const std::filesystem::path& file) {
  const bool fits =
      (value.is_number_unsigned() && std::in_range<Integer>(value.get<std::uint64_t>())) ||
      (value.is_number_integer() && !value.is_number_unsigned() &&
       std::in_range<Integer>(value.get<std::int64_t>()));
  if (!fits)
    throw io_error("tpx: " + file.string() + ": " + what + " is " + value.dump() +
                   ", not a whole number between " +
                   std::to_string(std::numeric_limits<Integer>::min()) + " and " +
                   std::to_string(std::numeric_limits<Integer>::max()));
  return value.get<Integer>();
}

// A JSON array of whole numbers, each checked as json_integer checks one.
template <class Integer>
std::vector<Integer> json_integers(const nlohmann::json& array, const std::string& what,
                                   const std::filesystem::path& file) {
  if (!array.is_array())
    throw io_error("tpx: " + file.string() + ": " + what + " is " + array.dump() +
                   ", not an array of whole numbers");
  std::vector<Integer> numbers;
  numbers.reserve(array.size());
  for (const nlohmann::json& value : array)
    numbers.push_back(json_integer<Integer>(value, what + " element", file));
  return numbers;
}

}  // namespace tpx::io

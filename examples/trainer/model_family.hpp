// What a model family tells the example trainers' shared code (training.hpp's loop and checkpoints,
// command_line.hpp's flags) beyond its types: the size flags a program offers for it, its switches
// and choices (optional: Family::switch_flags, Family::choice_flags), a note for the end of --help
// (optional: Family::help_footer), and the combinations of them it refuses (optional:
// Family::unsupported(config), the sentence for the user, or empty), the ranks a mesh leaves
// without work (optional: Family::idle_ranks(config, r, x, y), a sentence the run's first lines
// give as a note, or empty), and whether its model writes text (optional: writes_text below). A
// family whose config has a bool `overlap` gets --overlap on|off, with Family::overlap_help
// saying what it moves. A flag is
// data (a name, the field it sets, a line of help), not a CLI11 call, so that a family's header
// needs no command-line library and the command line checks every size alike (a whole number from
// `least`, 1 unless the family says otherwise, up to the field's largest value).
#pragma once

#include <concepts>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

namespace trainer {

struct size_flag {
  const char* name;  // "--d-model"
  std::variant<int*, std::int64_t*> field;
  const char* help;
  int least = 1;  // the smallest value the model accepts
};

// A model config with a bool `overlap` (the GPT's, the MLP's): its programs take
// --overlap on|off, which Family::overlap_help describes.
template <class Config>
concept with_overlap = requires(Config c) {
  { c.overlap } -> std::convertible_to<bool>;
};

// A family whose model writes text (the GPT's: Family::writes_text): its programs take
// --generate, answered by Family::generate_main(program, command_line) instead of training.
template <class Family>
concept writes_text = requires {
  requires Family::writes_text;
};

// The note a family's idle_ranks (above) gives for a batch split over fewer rows than ranks: "ranks
// without a row: 1 of the 3 of X (--batch 2 ...)"; empty when each rank has one. `axes` names the
// axes the rows are split over, `rows_are` what the rows are.
inline std::string ranks_without_rows(std::int64_t rows, std::int64_t ranks,
                                      const std::string& axes, const std::string& rows_are) {
  if (rows >= ranks) return {};
  return "ranks without a row: " + std::to_string(ranks - rows) + " of the " +
         std::to_string(ranks) + " of " + axes + " (" + rows_are + "), which only join the " +
         "collectives (at least " + std::to_string(ranks) + " rows keep each busy)";
}

// The shape (Family::shape) a checkpoint's saved state records, each key of the shape with its
// saved value or, for a key saved before it was recorded (tpx-gpt's mlp, 2026-12-05), the default
// config's: what every run had then. --resume compares it with the run's (training.hpp's
// load_checkpoint); --generate builds its model from it (gpt::family::config_of).
template <class Family>
nlohmann::json recorded_shape(const nlohmann::json& state) {
  nlohmann::json shape = Family::shape(typename Family::config{});
  for (auto& [key, value] : shape.items()) value = state.value(key, value);
  return shape;
}

// A flag whose value is one of `choices`, setting a string of the model's config ("--schedule").
struct choice_flag {
  const char* name;
  std::string* field;
  const char* help;
  std::vector<std::string> choices;
};

// A flag without a value that sets a bool of the model's config ("--fused-attention").
struct switch_flag {
  const char* name;
  bool* field;
  const char* help;
};

}  // namespace trainer

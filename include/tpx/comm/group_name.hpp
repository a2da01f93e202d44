// How error messages name a group of ranks: "group {0,2} (mesh axis X)", its members in world
// numbering and, when known, the mesh axes it spans. The host, simulated and MPI communicators
// all speak of groups this way, so a message reads the same whichever backend ran the ranks.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace tpx::detail {

// "{0,2,5}"
inline std::string bracketed(std::span<const int> ranks) {
  std::string text = "{";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i != 0) text += ',';
    text += std::to_string(ranks[i]);  // appended, not `"," + ...`: GCC 12 -O3 -Wrestrict
  }
  return text + "}";
}

// "group {0,2} (mesh axis X)"; `label` says what the group is and may be empty.
inline std::string group_name(std::span<const int> world_ranks, const std::string& label) {
  return "group " + bracketed(world_ranks) + (label.empty() ? "" : " (" + label + ")");
}

}  // namespace tpx::detail

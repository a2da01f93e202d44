// CollectiveArguments: the checks of a collective's buffer sizes against its per-rank counts,
// shared by the host and MPI communicators.
//
// A rank whose buffers disagree with the counts it passes would make its peers read or write
// past a buffer, so each communicator checks before it meets its group and throws
// std::invalid_argument naming the collective, the group and the rank:
// "tpx: all_gather on group {0,2} (mesh axis X), rank 1: out.size() is 3, expected 5".
#pragma once

#include <cstddef>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "tpx/comm/collective_descriptor.hpp"

namespace tpx::detail {

class CollectiveArguments {
 public:
  // `caller` says who checks, for the messages: "group {0,2} (mesh axis X), rank 1".
  explicit CollectiveArguments(std::string caller) : caller_(std::move(caller)) {}

  // The sum of the counts, after checking there are `expected` of them.
  std::size_t sum_of_counts(CollectiveOp op, std::span<const std::size_t> counts,
                            int expected) const {
    if (counts.size() != static_cast<std::size_t>(expected)) {
      invalid(op, "counts has " + std::to_string(counts.size()) + " entries, expected " +
                      std::to_string(expected));
    }
    return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  }

  void expect_size(CollectiveOp op, std::string_view name, std::size_t actual,
                   std::size_t expected) const {
    if (actual == expected) return;
    invalid(op, std::string(name) + ".size() is " + std::to_string(actual) + ", expected " +
                    std::to_string(expected));
  }

  [[noreturn]] void invalid(CollectiveOp op, const std::string& what) const {
    throw std::invalid_argument("tpx: " + std::string(op_name(op)) + " on " + caller_ + ": " +
                                what);
  }

 private:
  std::string caller_;
};

}  // namespace tpx::detail

// The argument checks every tpx communicator makes before it meets its group, shared by the
// simulated-mesh and NCCL communicators: counts of the right length, buffer sizes that match
// them, a root or peer inside the group. A failed check throws std::invalid_argument naming the
// collective, the group and the rank, e.g. "tpx: all_gather on NCCL group of 4, rank 1:
// out.size() is 10, expected 12", the same words as the host communicator's.
#pragma once

#include <cstddef>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>


namespace tpx::cuda::detail {

class collective_checks {
 public:
  // `group` names the group in messages ("simulated group {0,1}").
  collective_checks(std::string group, int rank) : group_(std::move(group)), rank_(rank) {}

  // The sum of the counts, which must have `expected` entries.
  std::size_t sum_of_counts(std::string_view op, std::span<const std::size_t> counts, int expected) const {
    if (counts.size() != static_cast<std::size_t>(expected))
      invalid(op, "counts has " + std::to_string(counts.size()) + " entries, expected " + std::to_string(expected));
    return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  }
  void expect_size(std::string_view op, std::string_view name, std::size_t actual, std::size_t expected) const {
    if (actual != expected)
      invalid(op, std::string(name) + ".size() is " + std::to_string(actual) + ", expected " + std::to_string(expected));
  }
  // `role` is "root" or "peer".
  void expect_rank(std::string_view op, std::string_view role, int r, int size) const {
    if (r < 0 || r >= size) invalid(op, std::string(role) + " " + std::to_string(r) + " is not a rank of the group");
  }
  [[noreturn]] void invalid(std::string_view op, const std::string& what) const {
    throw std::invalid_argument("tpx: " + std::string(op) + " on " + group_ + ", rank " + std::to_string(rank_) + ": " +
                                what);
  }

 private:
  std::string group_;
  int rank_;
};

}  // namespace tpx::cuda::detail

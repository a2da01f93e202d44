// The inputs of the communicator tests (tests/unit/host_communicator_test.cpp, tests/mpi): values
// from a formula of (rank, index, salt), so that every rank and every backend can make any rank's
// input, with NaN and -inf mixed in for the maximum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace collective_values {

// A value in [-1, 1) with a full mantissa, different for every (rank, index, salt).
template <class T>
T value(int rank, std::size_t i, int salt = 0) {
  std::uint64_t h = (static_cast<std::uint64_t>(rank) * 1000003u + i) * 0x9e3779b97f4a7c15ull +
                    static_cast<std::uint64_t>(salt) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  return static_cast<T>(static_cast<float>(h >> 40) / static_cast<float>(1ull << 23) - 1.0f);
}

template <class T>
std::vector<T> values(int rank, std::size_t n, int salt = 0) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(rank, i, salt);
  return v;
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// values() with NaN and -inf mixed in, for all_reduce max: element i is -inf on every rank when
// i % 11 == 4 (the maximum is -inf), -inf on even ranks when i % 5 == 1, and NaN on rank
// i % 7 (if the group has it) when i % 13 == 6.
template <class T>
std::vector<T> values_with_specials(int rank, std::size_t n) {
  std::vector<T> v = values<T>(rank, n, 2);
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 11 == 4 || (i % 5 == 1 && rank % 2 == 0)) v[i] = static_cast<T>(-kInf);
    if (i % 13 == 6 && static_cast<int>(i % 7) == rank) v[i] = static_cast<T>(kNaN);
  }
  return v;
}

}  // namespace collective_values

// The collectives of the nccl-tests sweep as a table, shared by the host bench
// (bench/collectives.cpp: threads or MPI processes) and the CUDA bench (bench/cuda/collectives.cu:
// the simulated mesh or NCCL), which differ only in where the buffers live and how ranks start.
//
// Each entry says, nccl-tests' way, how a size in bytes becomes one rank's layout (count, input
// and output elements, where input and output start when they share one buffer in place), the
// bus-bandwidth factor, how to call the collective on a tpx::any_communicator, and element j of
// rank r's correct output when every rank's input is the seeded value_at(r, i): integers in
// [-16, 15], whose sums are exact in fp32 in any order, so #wrong must be 0 on every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <tpx/comm/any_communicator.hpp>

namespace tpx::bench {

// The seeded input: element i of rank r's input is an integer in [-16, 15].
inline float value_at(int rank, std::size_t i) {
  const std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull + (rank + 1ull) * 0xC2B2AE3D27D4EB4Full;
  return static_cast<float>(static_cast<int>(h >> 59) - 16);
}

// One rank's view of one collective at one size, in elements of float.
struct layout {
  std::size_t count = 0;  // nccl-tests' count: the count argument NCCL would be given
  std::size_t send = 0;   // elements of this rank's input
  std::size_t recv = 0;   // elements of this rank's output
  // In place, input and output share one buffer of max(send, recv) elements: where each starts.
  std::size_t in_place_input = 0;
  std::size_t in_place_output = 0;
};

// The table of collectives, as nccl-tests keeps one file per collective.
struct collective {
  const char* name;
  const char* redop;
  int root;
  bool has_in_place;
  double (*bus_factor)(int n);
  layout (*shape)(std::int64_t bytes, int n, int rank);
  void (*run)(tpx::any_communicator& comm, const layout& l, const float* in, float* out);
  // Element j of rank `rank`'s output.
  float (*expected)(const layout& l, int n, int rank, std::size_t j);
};

inline std::vector<std::size_t> equal_counts(std::size_t entries, std::size_t count) {
  return std::vector<std::size_t>(entries, count);
}

inline float sum_over_ranks(int n, std::size_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += value_at(r, i);
  return s;
}

inline std::size_t per_rank_block(std::int64_t bytes, int n) {
  return static_cast<std::size_t>(bytes) / sizeof(float) / static_cast<std::size_t>(n);
}

inline const collective collectives[] = {
    {"all_gather", "none", -1, true, [](int n) { return (n - 1.0) / n; },
     [](std::int64_t bytes, int n, int rank) {
       const std::size_t c = per_rank_block(bytes, n);
       return layout{c, c, n * c, rank * c, 0};
     },
     [](tpx::any_communicator& comm, const layout& l, const float* in, float* out) {
       comm.all_gather(std::span(in, l.send), std::span(out, l.recv),
                       equal_counts(comm.size(), l.count));
     },
     [](const layout& l, int, int, std::size_t j) {
       return value_at(static_cast<int>(j / l.count), j % l.count);
     }},
    {"reduce_scatter", "sum", -1, true, [](int n) { return (n - 1.0) / n; },
     [](std::int64_t bytes, int n, int rank) {
       const std::size_t c = per_rank_block(bytes, n);
       return layout{c, n * c, c, 0, rank * c};
     },
     [](tpx::any_communicator& comm, const layout& l, const float* in, float* out) {
       comm.reduce_scatter(std::span(in, l.send), std::span(out, l.recv),
                           equal_counts(comm.size(), l.count));
     },
     [](const layout& l, int n, int rank, std::size_t j) {
       return sum_over_ranks(n, rank * l.count + j);
     }},
    {"all_reduce", "sum", -1, true, [](int n) { return 2.0 * (n - 1.0) / n; },
     [](std::int64_t bytes, int, int) {
       const std::size_t c = static_cast<std::size_t>(bytes) / sizeof(float);
       return layout{c, c, c, 0, 0};
     },
     [](tpx::any_communicator& comm, const layout& l, const float* in, float* out) {
       comm.all_reduce(std::span(in, l.send), std::span(out, l.recv));
     },
     [](const layout&, int n, int, std::size_t j) { return sum_over_ranks(n, j); }},
    {"all_to_all", "none", -1, false, [](int n) { return (n - 1.0) / n; },
     [](std::int64_t bytes, int n, int) {
       const std::size_t c = per_rank_block(bytes, n);
       return layout{c, n * c, n * c, 0, 0};
     },
     [](tpx::any_communicator& comm, const layout& l, const float* in, float* out) {
       const auto n = static_cast<std::size_t>(comm.size());
       comm.all_to_all(std::span(in, l.send), std::span(out, l.recv), equal_counts(n * n, l.count));
     },
     [](const layout& l, int, int rank, std::size_t j) {
       return value_at(static_cast<int>(j / l.count), rank * l.count + j % l.count);
     }},
    {"broadcast", "none", 0, true, [](int) { return 1.0; },
     [](std::int64_t bytes, int, int) {
       const std::size_t c = static_cast<std::size_t>(bytes) / sizeof(float);
       return layout{c, c, c, 0, 0};
     },
     [](tpx::any_communicator& comm, const layout& l, const float* in, float* out) {
       comm.broadcast(std::span(in, l.send), std::span(out, l.recv), 0);
     },
     [](const layout&, int, int, std::size_t j) { return value_at(0, j); }},
};

}  // namespace tpx::bench

// tpx-bench-cuda collectives: nccl-tests' sweep on tpx's CUDA communicators (measure.hpp): the
// simulated mesh (every rank a thread on one GPU, device-to-device copies and reduction
// kernels) or NCCL (one GPU per rank, spmd(tpx::cuda_devices, ...)).
//
// Sizes, counts, algbw and busbw follow NVIDIA/nccl-tests doc/PERFORMANCE.md, as the host
// bench does (bench/collectives.cpp): S is the whole array (all_gather's output,
// reduce_scatter's input, one rank's all_to_all send buffer), algbw = S / t, busbw = algbw *
// 2(n-1)/n for all_reduce, (n-1)/n for reduce_scatter, all_gather and all_to_all, 1 for
// broadcast. Each size runs out of place and in place (nccl-tests' layouts; all_to_all has no
// in-place form), timed as the mean of -n back-to-back calls after -w warm-up calls, from a
// barrier that has drained every rank's stream to another. Then the inputs are refilled with
// seeded integers (exact sums in any order), the collective runs once more and #wrong counts
// the elements, over all ranks, that differ from the host-computed answer.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <tpx/cuda/cuda.hpp>

#include "measure.hpp"

namespace tpx::bench::cuda {

namespace {

TPX_MESH_AXES(R);

// Element i of rank r's input: an integer in [-16, 15].
float value_at(int rank, std::size_t i) {
  const std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull + (rank + 1ull) * 0xC2B2AE3D27D4EB4Full;
  return static_cast<float>(static_cast<int>(h >> 59) - 16);
}
float sum_over_ranks(int n, std::size_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += value_at(r, i);
  return s;
}

// One rank's view of one collective at one size, in floats (as in the host bench).
struct layout {
  std::size_t count = 0, send = 0, recv = 0, in_place_input = 0, in_place_output = 0;
};

struct collective {
  const char* name;
  const char* redop;
  int root;
  bool has_in_place;
  double (*bus_factor)(int n);
  layout (*shape)(std::int64_t bytes, int n, int rank);
  void (*run)(any_communicator& comm, const layout& l, const float* in, float* out);
  float (*expected)(const layout& l, int n, int rank, std::size_t j);
};

std::size_t per_rank(std::int64_t bytes, int n) { return static_cast<std::size_t>(bytes) / sizeof(float) / n; }
std::vector<std::size_t> equal_counts(std::size_t entries, std::size_t count) { return std::vector<std::size_t>(entries, count); }

const collective collectives[] = {
    {"all_gather", "none", -1, true, [](int n) { return (n - 1.0) / n; },
     [](std::int64_t bytes, int n, int rank) {
       const std::size_t c = per_rank(bytes, n);
       return layout{c, c, n * c, rank * c, 0};
     },
     [](any_communicator& comm, const layout& l, const float* in, float* out) {
       comm.all_gather(std::span(in, l.send), std::span(out, l.recv), equal_counts(comm.size(), l.count));
     },
     [](const layout& l, int, int, std::size_t j) { return value_at(static_cast<int>(j / l.count), j % l.count); }},
    {"reduce_scatter", "sum", -1, true, [](int n) { return (n - 1.0) / n; },
     [](std::int64_t bytes, int n, int rank) {
       const std::size_t c = per_rank(bytes, n);
       return layout{c, n * c, c, 0, rank * c};
     },
     [](any_communicator& comm, const layout& l, const float* in, float* out) {
       comm.reduce_scatter(std::span(in, l.send), std::span(out, l.recv), equal_counts(comm.size(), l.count));
     },
     [](const layout& l, int n, int rank, std::size_t j) { return sum_over_ranks(n, rank * l.count + j); }},
    {"all_reduce", "sum", -1, true, [](int n) { return 2.0 * (n - 1.0) / n; },
     [](std::int64_t bytes, int, int) {
       const std::size_t c = static_cast<std::size_t>(bytes) / sizeof(float);
       return layout{c, c, c, 0, 0};
     },
     [](any_communicator& comm, const layout& l, const float* in, float* out) {
       comm.all_reduce(std::span(in, l.send), std::span(out, l.recv));
     },
     [](const layout&, int n, int, std::size_t j) { return sum_over_ranks(n, j); }},
    {"all_to_all", "none", -1, false, [](int n) { return (n - 1.0) / n; },
     [](std::int64_t bytes, int n, int) {
       const std::size_t c = per_rank(bytes, n);
       return layout{c, n * c, n * c, 0, 0};
     },
     [](any_communicator& comm, const layout& l, const float* in, float* out) {
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
     [](any_communicator& comm, const layout& l, const float* in, float* out) {
       comm.broadcast(std::span(in, l.send), std::span(out, l.recv), 0);
     },
     [](const layout&, int, int, std::size_t j) { return value_at(0, j); }},
};

struct timing {
  double seconds = 0;
  std::int64_t wrong = 0;
};

template <class RankT>
void sweep(RankT& rank, const std::vector<std::int64_t>& sizes, const std::vector<std::string>& ops, int iters,
           int warmup, bool check, std::vector<std::atomic<std::int64_t>>& wrong_of_rank,
           const std::function<void(const collective_row&)>& row_done) {
  any_communicator& comm = rank.template group<R>();
  const int n = comm.size(), me = comm.rank();
  const std::size_t largest = static_cast<std::size_t>(*std::ranges::max_element(sizes)) / sizeof(float);
  auto send = tpx::cuda::device_space::make_buffer<float>(rank, largest);
  auto recv = tpx::cuda::device_space::make_buffer<float>(rank, largest);
  const auto drained = [&] {  // every rank's earlier work has finished
    comm.barrier();
    rank.synchronize();
    comm.barrier();
  };
  const auto measure = [&](const collective& c, const layout& l, bool in_place) {
    float* in = in_place ? recv.data() + l.in_place_input : send.data();
    float* out = recv.data() + (in_place ? l.in_place_output : 0);
    const auto fill = [&] {
      std::vector<float> host(l.send);
      for (std::size_t i = 0; i < l.send; ++i) host[i] = value_at(me, i);
      tpx::cuda::device_space::from_host(rank, host.data(), host.size(), in);
    };
    fill();
    for (int i = 0; i < warmup; ++i) c.run(comm, l, in, out);
    drained();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) c.run(comm, l, in, out);
    drained();
    timing t{std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters, 0};
    if (!check) return t;
    fill();
    c.run(comm, l, in, out);
    std::vector<float> got(l.recv);
    tpx::cuda::device_space::to_host(rank, out, got.size(), got.data());
    std::int64_t wrong = 0;
    for (std::size_t j = 0; j < l.recv; ++j) wrong += got[j] != c.expected(l, n, me, j);
    wrong_of_rank[me] = wrong;
    drained();
    for (const auto& w : wrong_of_rank) t.wrong += w;
    drained();  // no rank overwrites its count before rank 0 has read it
    return t;
  };
  for (const collective& c : collectives) {
    if (std::ranges::find(ops, c.name) == ops.end()) continue;
    for (std::int64_t size : sizes) {
      const layout l = c.shape(size, n, me);
      if (l.count == 0) continue;
      const timing oop = measure(c, l, false);
      const timing ip = c.has_in_place ? measure(c, l, true) : timing{};
      if (me != 0) continue;
      const auto bytes = static_cast<std::int64_t>(std::max(l.send, l.recv) * sizeof(float));
      const auto algbw = [&](const timing& t) { return bytes / t.seconds / 1e9; };
      collective_row row{c.name, c.redop, n, c.root, bytes, static_cast<std::int64_t>(l.count),
                         oop.seconds * 1e6, algbw(oop), algbw(oop) * c.bus_factor(n), oop.wrong, c.has_in_place};
      if (c.has_in_place) {
        row.ip_us = ip.seconds * 1e6;
        row.ip_algbw = algbw(ip);
        row.ip_busbw = algbw(ip) * c.bus_factor(n);
        row.ip_wrong = ip.wrong;
      }
      row_done(row);
    }
  }
}

}  // namespace

void measure_collectives(mesh_kind kind, int ranks, const std::vector<std::int64_t>& sizes,
                         const std::vector<std::string>& ops, int iters, int warmup, bool check,
                         const std::function<void(const collective_row&)>& row_done) {
  std::vector<std::atomic<std::int64_t>> wrong_of_rank(static_cast<std::size_t>(ranks));
  const auto fn = [&](auto& rank) { sweep(rank, sizes, ops, iters, warmup, check, wrong_of_rank, row_done); };
  if (kind == mesh_kind::simulated)
    spmd(cuda_simulated, Mesh<R>{ranks}, fn);
  else
    spmd(cuda_devices, Mesh<R>{ranks}, fn);
}

}  // namespace tpx::bench::cuda

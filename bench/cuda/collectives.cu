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

#include "../support/collective_table.hpp"
#include "measure.hpp"

namespace tpx::bench::cuda {

namespace {

TPX_MESH_AXES(R);

using tpx::bench::collective;
using tpx::bench::collectives;
using tpx::bench::layout;
using tpx::bench::value_at;


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

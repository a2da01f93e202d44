// Every collective of a CUDA communicator checked against values computed on the host, run on
// whichever CUDA launcher is given (the simulated mesh, or one GPU per rank over NCCL), so the
// simulated-mesh and NCCL tests check the same cases.
//
// Inputs are small integers (element i of rank r's input is in [-8, 7]): their sums over up to
// 16 ranks are exact in fp32 and in bf16, whatever the order, so every result must equal the
// host's exactly. all_reduce runs as a sum and as a maximum (reduction::max; -inf among the
// inputs, on every rank for some elements; no NaN, which NCCL's max does not propagate). Each case
// runs with equal counts and with uneven ones (the blocks of an extent that does not divide),
// for float and bf16, out of place and, where the collective has one, in place. Ranks count
// their wrong elements; the test checks the totals after spmd.
#pragma once

#include <doctest/doctest.h>

#include <math.h>  // INFINITY

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <tpx/cuda/cuda.hpp>

namespace tpx::cuda::testing {

TPX_MESH_AXES(R);

inline float input_value(int rank, std::size_t i) { return static_cast<float>(static_cast<int>((i * 7 + rank * 5) % 16) - 8); }

// The per-rank block sizes of `total` elements over n ranks: equal, or as split_block splits.
inline std::vector<std::size_t> block_counts(std::size_t total, int n, bool uneven) {
  std::vector<std::size_t> counts(n);
  for (int r = 0; r < n; ++r)
    counts[r] = uneven ? static_cast<std::size_t>(split_block(static_cast<std::int64_t>(total), n, r).size) : total / n;
  return counts;
}

// One rank's test of every collective for element type T; returns its wrong elements.
template <class T, class RankT>
std::int64_t wrong_elements(RankT& rank, bool uneven) {
  any_communicator& comm = rank.template group<R>();
  const int n = comm.size(), me = comm.rank();
  std::int64_t wrong = 0;
  const auto device = [&](const std::vector<float>& host) {
    const std::vector<T> typed(host.begin(), host.end());
    auto buffer = device_space::make_buffer<T>(rank, typed.size());
    device_space::from_host(rank, typed.data(), typed.size(), buffer.data());
    return buffer;
  };
  const auto expect = [&](const device_buffer<T>& got, std::size_t first, const std::vector<float>& want) {
    std::vector<T> host(want.size());
    device_space::to_host(rank, got.data() + first, want.size(), host.data());
    for (std::size_t i = 0; i < want.size(); ++i) wrong += static_cast<float>(host[i]) != want[i];
  };
  const auto inputs = [&](int r, std::size_t count, std::size_t from = 0) {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = input_value(r, from + i);
    return v;
  };
  const auto summed = [&](std::size_t count, std::size_t from) {
    std::vector<float> v(count, 0.0f);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i) v[i] += input_value(r, from + i);
    return v;
  };
  const std::size_t total = 64 * static_cast<std::size_t>(n) + (uneven ? 3 : 0);
  const auto counts = block_counts(total, n, uneven);
  std::vector<std::size_t> starts(n, 0);
  for (int r = 1; r < n; ++r) starts[r] = starts[r - 1] + counts[r - 1];

  // all_gather: out of place, then in place (the input is this rank's block of the output).
  {
    auto in = device(inputs(me, counts[me]));
    auto out = device(std::vector<float>(total, -100.0f));
    comm.all_gather(std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), counts);
    for (int r = 0; r < n; ++r) expect(out, starts[r], inputs(r, counts[r]));
    auto both = device(std::vector<float>(total, -100.0f));
    device_space::copy_box<T, 1>(rank, in.data(), {static_cast<std::int64_t>(counts[me])}, {0}, both.data(),
                                 {static_cast<std::int64_t>(total)}, {static_cast<std::int64_t>(starts[me])},
                                 {static_cast<std::int64_t>(counts[me])});
    comm.all_gather(std::span<const T>(both.data() + starts[me], counts[me]), std::span<T>(both.data(), total), counts);
    for (int r = 0; r < n; ++r) expect(both, starts[r], inputs(r, counts[r]));
  }
  // reduce_scatter: this rank's block of the sum.
  {
    auto in = device(inputs(me, total));
    auto out = device(std::vector<float>(counts[me], -100.0f));
    comm.reduce_scatter(std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), counts);
    expect(out, 0, summed(counts[me], starts[me]));
  }
  // all_reduce, out of place and in place.
  {
    auto in = device(inputs(me, total));
    auto out = device(std::vector<float>(total, -100.0f));
    comm.all_reduce(std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()));
    expect(out, 0, summed(total, 0));
    comm.all_reduce(std::span<const T>(in.data(), in.size()), std::span<T>(in.data(), in.size()));
    expect(in, 0, summed(total, 0));
  }
  // all_reduce with reduction::max, out of place and in place. Element i is -inf on rank r when
  // (i + r) % 5 == 0, and on every rank when i % 7 == 3 (its maximum is -inf).
  {
    const auto with_infinities = [&](int r) {
      std::vector<float> v = inputs(r, total);
      for (std::size_t i = 0; i < total; ++i)
        if ((i + static_cast<std::size_t>(r)) % 5 == 0 || i % 7 == 3) v[i] = -INFINITY;
      return v;
    };
    std::vector<float> maxima(total, -INFINITY);
    for (int r = 0; r < n; ++r) {
      const std::vector<float> v = with_infinities(r);
      for (std::size_t i = 0; i < total; ++i) maxima[i] = std::max(maxima[i], v[i]);
    }
    auto in = device(with_infinities(me));
    auto out = device(std::vector<float>(total, -100.0f));
    comm.all_reduce(std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), reduction::max);
    expect(out, 0, maxima);
    comm.all_reduce(std::span<const T>(in.data(), in.size()), std::span<T>(in.data(), in.size()), reduction::max);
    expect(in, 0, maxima);
  }
  // all_to_all: block s of rank r's input (its elements from r * total + starts[s]) goes to s.
  {
    std::vector<std::size_t> matrix(static_cast<std::size_t>(n) * n);
    for (int from = 0; from < n; ++from)
      for (int to = 0; to < n; ++to) matrix[from * n + to] = counts[to];
    auto in = device(inputs(me, total));
    auto out = device(std::vector<float>(counts[me] * n, -100.0f));
    comm.all_to_all(std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()), matrix);
    for (int r = 0; r < n; ++r) {
      std::vector<float> want(counts[me]);
      for (std::size_t i = 0; i < counts[me]; ++i) want[i] = input_value(r, starts[me] + i);
      expect(out, r * counts[me], want);
    }
  }
  // broadcast from every root.
  for (int root = 0; root < n; ++root) {
    auto in = device(inputs(root, total));
    auto out = device(std::vector<float>(total, -100.0f));
    comm.broadcast(std::span<const T>(in.data(), me == root ? in.size() : 0), std::span<T>(out.data(), out.size()), root);
    expect(out, 0, inputs(root, total));
  }
  comm.barrier();
  return wrong;
}

// Runs every case on `launcher` with a mesh of `ranks` ranks.
template <class Launcher>
void check_collectives(Launcher launcher, int ranks) {
  CAPTURE(ranks);
  std::atomic<std::int64_t> wrong{0};
  spmd(launcher, Mesh<R>{ranks}, [&](auto& rank) {
    for (bool uneven : {false, true}) {
      wrong += wrong_elements<float>(rank, uneven);
      wrong += wrong_elements<bf16>(rank, uneven);
    }
  });
  CHECK(wrong.load() == 0);
}

}  // namespace tpx::cuda::testing

// HostCommunicator: one rank's handle on one group of a HostWorld, providing the collectives of
// tpx::CommunicatorFor over shared memory, for fp32 and bf16.
//
// Every collective follows one pattern: publish a pointer to this rank's input, meet the group,
// read the peers' inputs directly (std::memcpy for blocks, plain loops the compiler vectorises
// for sums), and meet again before returning, so that no rank changes or frees a buffer a peer
// still reads. all_gather, reduce_scatter, all_to_all and broadcast need those two meetings, and
// each rank pulls exactly its own result. all_reduce needs them too and makes one pass over
// memory: each rank owns a 1/size chunk, reduces that chunk of every input tile by tile and
// writes each reduced tile into that chunk of every rank's output (published beside the inputs).
// Only the owner touches a chunk, in any buffer, so in and out may alias. Sums run in fp32
// over the ranks in group-rank order and are rounded once, so every rank gets the same bits,
// equal to a sequential sum. all_reduce with reduction::max folds the same way with
// kernels::max_reducer (exact; a NaN input gives NaN; -inf is an ordinary value).
//
// A rank whose sizes disagree with the counts throws std::invalid_argument without meeting its
// group; failures of the group throw comm_error (see host_world.hpp). A handle is cheap to copy,
// belongs to one rank thread, and must not outlive its world.
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tpx/comm/collective_descriptor.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/host_group.hpp"
#include "tpx/comm/host_world.hpp"
#include "tpx/core/bfloat16.hpp"
#include "tpx/kernels/reduction.hpp"

namespace tpx {

template <class T>
concept HostElement = std::same_as<T, float> || std::same_as<T, bf16>;

class HostCommunicator {
 public:
  // The handle of `world_rank` on its group in set `group_set` (HostWorld::whole_world or an
  // id returned by HostWorld::add_groups).
  HostCommunicator(HostWorld& world, int group_set, int world_rank)
      : group_(&world.group_of(group_set, world_rank)),
        rank_(static_cast<int>(std::ranges::find(group_->world_ranks(), world_rank) -
                               group_->world_ranks().begin())) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return group_->size(); }
  // The members in world numbering, in group-rank order.
  std::span<const int> world_ranks() const noexcept { return group_->world_ranks(); }

  // Returns once every rank of the group has called it.
  void barrier() { group_->exchange(rank_, CollectiveDescriptor{}); }

  // out = every rank's in, rank after rank; in may be this rank's block of out (in place).
  template <HostElement T>
  void all_gather(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    const std::size_t total = sum_of_counts(Op::all_gather, counts, size());
    expect_size(Op::all_gather, "in", in.size(), counts[rank_]);
    expect_size(Op::all_gather, "out", out.size(), total);
    const auto peers = group_->exchange(rank_, call<T>(Op::all_gather, total, counts), in.data());
    std::size_t offset = 0;
    for (int s = 0; s < size(); ++s) {
      copy_elements(out.data() + offset, input<T>(peers[s]), counts[s]);
      offset += counts[s];
    }
    group_->wait_for_all(rank_);
  }

  // out = this rank's block (counts[rank()] elements) of the sum over ranks of in.
  template <HostElement T>
  void reduce_scatter(std::span<const T> in, std::span<T> out,
                      std::span<const std::size_t> counts) {
    const std::size_t total = sum_of_counts(Op::reduce_scatter, counts, size());
    expect_size(Op::reduce_scatter, "in", in.size(), total);
    expect_size(Op::reduce_scatter, "out", out.size(), counts[rank_]);
    const std::size_t offset =
        std::accumulate(counts.begin(), counts.begin() + rank_, std::size_t{0});
    const auto peers =
        group_->exchange(rank_, call<T>(Op::reduce_scatter, total, counts), in.data());
    reduce_inputs<kernels::sum_reducer<compute_t<T>>>(peers, offset, out.size(), out.data());
    group_->wait_for_all(rank_);
  }

  // out = the sum (or, with reduction::max, the maximum) over ranks of in; in and out may be the
  // same memory.
  template <HostElement T>
  void all_reduce(std::span<const T> in, std::span<T> out, reduction op = reduction::sum) {
    expect_size(Op::all_reduce, "out", out.size(), in.size());
    const std::size_t n = in.size();
    const std::size_t mine = chunk_begin(n, rank_);
    const std::size_t mine_size = chunk_begin(n, rank_ + 1) - mine;
    const auto peers =
        group_->exchange(rank_, call<T>(Op::all_reduce, n, {}, -1, op), in.data(), out.data());
    // This rank alone reads and writes chunk `mine` of every buffer, so in == out is safe.
    constexpr std::size_t tile = 8192;
    std::array<T, tile> reduced;
    for (std::size_t begin = 0; begin < mine_size; begin += tile) {
      const std::size_t length = std::min(tile, mine_size - begin);
      if (op == reduction::max)
        reduce_inputs<kernels::max_reducer<compute_t<T>>>(peers, mine + begin, length,
                                                          reduced.data());
      else
        reduce_inputs<kernels::sum_reducer<compute_t<T>>>(peers, mine + begin, length,
                                                          reduced.data());
      for (int s = 0; s < size(); ++s)
        copy_elements(static_cast<T*>(peers[s].output) + mine + begin, reduced.data(), length);
    }
    group_->wait_for_all(rank_);
  }

  // Block s of this rank's in (counts[rank() * size() + s] elements) goes to rank s, which
  // stores it as its block rank() of out.
  template <HostElement T>
  void all_to_all(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    const int n = size();
    const std::size_t total = sum_of_counts(Op::all_to_all, counts, n * n);
    const auto count = [&](int from, int to) { return counts[from * n + to]; };
    std::size_t sent = 0;
    std::size_t received = 0;
    for (int s = 0; s < n; ++s) {
      sent += count(rank_, s);
      received += count(s, rank_);
    }
    expect_size(Op::all_to_all, "in", in.size(), sent);
    expect_size(Op::all_to_all, "out", out.size(), received);
    const auto peers = group_->exchange(rank_, call<T>(Op::all_to_all, total, counts), in.data());
    std::size_t offset = 0;
    for (int s = 0; s < n; ++s) {
      std::size_t peer_offset = 0;  // where block rank_ starts in rank s's input
      for (int q = 0; q < rank_; ++q) peer_offset += count(s, q);
      copy_elements(out.data() + offset, input<T>(peers[s]) + peer_offset, count(s, rank_));
      offset += count(s, rank_);
    }
    group_->wait_for_all(rank_);
  }

  // out = root's in, on every rank; in is read on root only and may be out there.
  template <HostElement T>
  void broadcast(std::span<const T> in, std::span<T> out, int root) {
    if (root < 0 || root >= size()) {
      invalid(Op::broadcast, "root " + std::to_string(root) + " is not a rank of the group");
    }
    if (rank_ == root) expect_size(Op::broadcast, "in", in.size(), out.size());
    const auto peers = group_->exchange(rank_, call<T>(Op::broadcast, out.size(), {}, root),
                                        rank_ == root ? in.data() : nullptr);
    copy_elements(out.data(), input<T>(peers[root]), out.size());
    group_->wait_for_all(rank_);
  }

 private:
  using Op = detail::CollectiveOp;
  using CollectiveDescriptor = detail::CollectiveDescriptor;
  using Publication = detail::HostGroup::Publication;

  template <HostElement T>
  static CollectiveDescriptor call(Op op, std::size_t elements, std::span<const std::size_t> counts,
                                   int root = -1, reduction reduce = reduction::sum) {
    return {.op = op,
            .element = std::same_as<T, float> ? "float" : "bf16",
            .elements = elements,
            .counts_digest = counts.empty() ? 0 : detail::counts_digest(counts),
            .root = root,
            .reduce = reduce};
  }

  template <HostElement T>
  static const T* input(const Publication& peer) {
    return static_cast<const T*>(peer.input);
  }

  // Where chunk `s` of an all_reduce of n elements starts (chunk_begin(n, size()) == n).
  std::size_t chunk_begin(std::size_t n, int s) const {
    return n * static_cast<std::size_t>(s) / static_cast<std::size_t>(size());
  }

  template <HostElement T>
  static void copy_elements(T* to, const T* from, std::size_t n) {
    if (n != 0 && to != from) std::memcpy(to, from, n * sizeof(T));
  }

  // to[i] = the fold with reducer R (kernels/reduction.hpp: sum_reducer or max_reducer, over
  // compute_t<T>, fp32) over ranks, in rank order, of element offset + i of their inputs,
  // starting from rank 0's element (not R's identity, so a sum of -0s stays -0) and rounded once.
  // Tiles keep the accumulators in cache; a full tile has a constant length, so that its loops
  // vectorise even at -O2.
  template <class R, HostElement T>
  void reduce_inputs(std::span<const Publication> peers, std::size_t offset, std::size_t n,
                     T* to) const {
    using Acc = typename R::value_type;
    constexpr std::size_t tile = 512;
    std::array<Acc, tile> acc;
    const auto reduce_tile = [&](std::size_t begin, auto length) {
      const T* first = input<T>(peers[0]) + offset + begin;
      for (std::size_t i = 0; i < length; ++i) acc[i] = R::element(static_cast<float>(first[i]));
      for (int s = 1; s < size(); ++s) {
        const T* from = input<T>(peers[s]) + offset + begin;
        for (std::size_t i = 0; i < length; ++i)
          acc[i] = R::combine(acc[i], R::element(static_cast<float>(from[i])));
      }
      for (std::size_t i = 0; i < length; ++i) to[begin + i] = static_cast<T>(acc[i]);
    };
    std::size_t begin = 0;
    for (; n - begin >= tile; begin += tile) {
      reduce_tile(begin, std::integral_constant<std::size_t, tile>{});
    }
    if (begin < n) reduce_tile(begin, n - begin);
  }

  std::size_t sum_of_counts(Op op, std::span<const std::size_t> counts, int expected) const {
    if (counts.size() != static_cast<std::size_t>(expected)) {
      invalid(op, "counts has " + std::to_string(counts.size()) + " entries, expected " +
                      std::to_string(expected));
    }
    return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  }

  void expect_size(Op op, std::string_view name, std::size_t actual, std::size_t expected) const {
    if (actual == expected) return;
    invalid(op, std::string(name) + ".size() is " + std::to_string(actual) + ", expected " +
                    std::to_string(expected));
  }

  [[noreturn]] void invalid(Op op, const std::string& what) const {
    throw std::invalid_argument("tpx: " + std::string(detail::op_name(op)) + " on group " +
                                detail::bracketed(world_ranks()) + ", rank " +
                                std::to_string(rank_) + ": " + what);
  }

  detail::HostGroup* group_;
  int rank_;
};

static_assert(CommunicatorFor<HostCommunicator, float>,
              "HostCommunicator must provide every collective of CommunicatorFor<C, float>");
static_assert(CommunicatorFor<HostCommunicator, bf16>,
              "HostCommunicator must provide every collective of CommunicatorFor<C, bf16>");

}  // namespace tpx

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
#include <string>
#include <string_view>
#include <vector>

#include "tpx/comm/collective_arguments.hpp"
#include "tpx/comm/collective_descriptor.hpp"
#include "tpx/comm/group_name.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/host_group.hpp"
#include "tpx/comm/host_world.hpp"
#include "tpx/comm/rank_fold.hpp"
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
                               group_->world_ranks().begin())),
        arguments_("group " + detail::bracketed(world_ranks()) + ", rank " +
                   std::to_string(rank_)) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return group_->size(); }
  // The members in world numbering, in group-rank order.
  std::span<const int> world_ranks() const noexcept { return group_->world_ranks(); }

  // Returns once every rank of the group has called it.
  void barrier() { group_->exchange(rank_, CollectiveDescriptor{}); }

  // out = every rank's in, rank after rank; in may be this rank's block of out (in place).
  template <HostElement T>
  void all_gather(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    const std::size_t total = arguments_.sum_of_counts(Op::all_gather, counts, size());
    arguments_.expect_size(Op::all_gather, "in", in.size(), counts[rank_]);
    arguments_.expect_size(Op::all_gather, "out", out.size(), total);
    const auto peers = group_->exchange(
        rank_, detail::collective_call<T>(Op::all_gather, total, counts), in.data());
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
    const std::size_t total = arguments_.sum_of_counts(Op::reduce_scatter, counts, size());
    arguments_.expect_size(Op::reduce_scatter, "in", in.size(), total);
    arguments_.expect_size(Op::reduce_scatter, "out", out.size(), counts[rank_]);
    const std::size_t offset =
        std::accumulate(counts.begin(), counts.begin() + rank_, std::size_t{0});
    const auto peers = group_->exchange(
        rank_, detail::collective_call<T>(Op::reduce_scatter, total, counts), in.data());
    reduce_inputs<kernels::sum_reducer<compute_t<T>>>(peers, offset, out.size(), out.data());
    group_->wait_for_all(rank_);
  }

  // out = the sum (or, with reduction::max, the maximum) over ranks of in; in and out may be the
  // same memory.
  template <HostElement T>
  void all_reduce(std::span<const T> in, std::span<T> out, reduction op = reduction::sum) {
    arguments_.expect_size(Op::all_reduce, "out", out.size(), in.size());
    const std::size_t n = in.size();
    const std::size_t mine = chunk_begin(n, rank_);
    const std::size_t mine_size = chunk_begin(n, rank_ + 1) - mine;
    const auto peers = group_->exchange(
        rank_, detail::collective_call<T>(Op::all_reduce, n, {}, -1, op), in.data(), out.data());
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
    const std::size_t total = arguments_.sum_of_counts(Op::all_to_all, counts, n * n);
    const auto count = [&](int from, int to) { return counts[from * n + to]; };
    std::size_t sent = 0;
    std::size_t received = 0;
    for (int s = 0; s < n; ++s) {
      sent += count(rank_, s);
      received += count(s, rank_);
    }
    arguments_.expect_size(Op::all_to_all, "in", in.size(), sent);
    arguments_.expect_size(Op::all_to_all, "out", out.size(), received);
    const auto peers = group_->exchange(
        rank_, detail::collective_call<T>(Op::all_to_all, total, counts), in.data());
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
      arguments_.invalid(Op::broadcast,
                         "root " + std::to_string(root) + " is not a rank of the group");
    }
    if (rank_ == root) arguments_.expect_size(Op::broadcast, "in", in.size(), out.size());
    const auto peers =
        group_->exchange(rank_, detail::collective_call<T>(Op::broadcast, out.size(), {}, root),
                         rank_ == root ? in.data() : nullptr);
    copy_elements(out.data(), input<T>(peers[root]), out.size());
    group_->wait_for_all(rank_);
  }

 private:
  using Op = detail::CollectiveOp;
  using CollectiveDescriptor = detail::CollectiveDescriptor;
  using Publication = detail::HostGroup::Publication;

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

  // to[i] = the fold with R over ranks, in rank order, of element offset + i of their inputs
  // (rank_fold.hpp).
  template <class R, HostElement T>
  void reduce_inputs(std::span<const Publication> peers, std::size_t offset, std::size_t n,
                     T* to) const {
    detail::fold_ranks<R>(
        size(), [&](int s) { return input<T>(peers[s]) + offset; }, n, to);
  }

  detail::HostGroup* group_;
  int rank_;
  detail::CollectiveArguments arguments_;
};

static_assert(CommunicatorFor<HostCommunicator, float>,
              "HostCommunicator must provide every collective of CommunicatorFor<C, float>");
static_assert(CommunicatorFor<HostCommunicator, bf16>,
              "HostCommunicator must provide every collective of CommunicatorFor<C, bf16>");

}  // namespace tpx

// SimulatedCommunicator: the collectives of tpx::CommunicatorFor between ranks that are threads
// sharing ONE GPU, for users with a single device (NCCL refuses two ranks of a communicator on
// one GPU). It is the device twin of HostCommunicator and borrows its meeting point: ranks
// publish pointers through the HostGroup of a HostWorld (comm/host_group.hpp), which also checks
// that every rank called the same collective and carries failures and timeouts.
//
// The data never leaves the device. Each rank has its own stream; a collective is
//   1 record `ready` on my stream (my input is written), publish my input pointer and my
//     peer_state (events, scratch), meet;
//   2 make my stream wait for every peer's `ready`, then queue on my stream the device-to-device
//     copies (cudaMemcpyAsync) and reduction kernels (kernels/reduce.hpp: fp32 accumulation in
//     rank order, one rounding, the host communicator's bits; sum_arrays, or max_arrays for
//     all_reduce with reduction::max) that produce MY output from the peers' inputs;
//   3 record `done`, meet again, and make my stream wait for every peer's `done`, so that no
//     rank overwrites or frees an input a peer's stream has yet to read.
// No step blocks the host on the GPU: the meetings order the event records, the events order
// the streams. all_reduce reduces-then-gathers in two phases through per-rank device scratch
// (so in and out may alias), with a `middle` event between them; the scratch is the call's own,
// from the pool, since a rank's background lane (rank_resources.hpp) may run a collective of the
// same group beside one on the rank's own stream. Work goes to the rank's current stream.
//
// Sizes that disagree with the counts throw std::invalid_argument before the meeting, as on the
// host. Every collective is an NVTX range, and timed on the device from its first meeting to its
// last wait (the rank's communication_clock) unless the group has one rank.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpx/comm/collective_descriptor.hpp"
#include "tpx/comm/group_name.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/host_world.hpp"
#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/collective_checks.hpp"
#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/kernels/reduce.hpp"
#include "tpx/cuda/nvtx.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/cuda/stream.hpp"

namespace tpx::cuda {

template <class T>
concept SimulatedElement = std::same_as<T, float> || std::same_as<T, bf16>;

class SimulatedCommunicator {
 public:
  // The handle of `world_rank` on its group of set `group_set` of `world`; its work goes on the
  // stream of `resources`.
  SimulatedCommunicator(HostWorld& world, int group_set, int world_rank, rank_resources& resources)
      : group_(&world.group_of(group_set, world_rank)),
        rank_(static_cast<int>(std::ranges::find(group_->world_ranks(), world_rank) - group_->world_ranks().begin())),
        resources_(&resources),
        checks_("simulated group " + tpx::detail::bracketed(group_->world_ranks()), rank_) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return group_->size(); }

  // Every rank's later work (on its stream) follows every rank's earlier work.
  void barrier() {
    const nvtx_range range("barrier");
    const auto peers = meet(CollectiveDescriptor{}, nullptr);
    finish(peers);
  }

  template <SimulatedElement T>
  void all_gather(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    const std::size_t total = checks_.sum_of_counts("all_gather", counts, size());
    checks_.expect_size("all_gather", "in", in.size(), counts[rank_]);
    checks_.expect_size("all_gather", "out", out.size(), total);
    const nvtx_range range(label<T>(Op::all_gather, total));
    const auto peers = meet(call<T>(Op::all_gather, total, counts), in.data());
    std::size_t offset = 0;
    for (int s = 0; s < size(); ++s) {
      copy(out.data() + offset, input<T>(peers[s]), counts[s]);
      offset += counts[s];
    }
    finish(peers);
  }

  template <SimulatedElement T>
  void reduce_scatter(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    const std::size_t total = checks_.sum_of_counts("reduce_scatter", counts, size());
    checks_.expect_size("reduce_scatter", "in", in.size(), total);
    checks_.expect_size("reduce_scatter", "out", out.size(), counts[rank_]);
    const nvtx_range range(label<T>(Op::reduce_scatter, total));
    const std::size_t offset = std::accumulate(counts.begin(), counts.begin() + rank_, std::size_t{0});
    const auto peers = meet(call<T>(Op::reduce_scatter, total, counts), in.data());
    reduce_over_ranks(peers, [&](int s) { return input<T>(peers[s]) + offset; }, out.size(), out.data(),
                      reduction::sum);
    finish(peers);
  }

  template <SimulatedElement T>
  void all_reduce(std::span<const T> in, std::span<T> out, reduction op = reduction::sum) {
    checks_.expect_size("all_reduce", "out", out.size(), in.size());
    const std::size_t n = in.size();
    const nvtx_range range(label<T>(Op::all_reduce, n, op));
    const std::size_t mine = chunk_begin(n, rank_), mine_size = chunk_begin(n, rank_ + 1) - mine;
    // Freed on return, in the stream's order after every peer has copied from it (finish).
    auto scratch = device_buffer<T>::for_overwrite(mine_size, resources_->pool(), stream());
    state_.scratch = scratch.data();
    const auto peers = meet(call<T>(Op::all_reduce, n, {}, -1, op), in.data());
    T* my_chunk = scratch.data();
    reduce_over_ranks(peers, [&](int s) { return input<T>(peers[s]) + mine; }, mine_size, my_chunk, op);
    middle_.record(stream());
    group_->wait_for_all(rank_);
    for (int s = 0; s < size(); ++s) {
      if (s == rank_) continue;
      TPX_CUDA_CHECK(cudaStreamWaitEvent(stream(), state_of(peers[s]).middle, 0));
    }
    for (int s = 0; s < size(); ++s)
      copy(out.data() + chunk_begin(n, s), static_cast<const T*>(state_of(peers[s]).scratch),
           chunk_begin(n, s + 1) - chunk_begin(n, s));
    finish(peers);
  }

  template <SimulatedElement T>
  void all_to_all(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    const int n = size();
    const std::size_t total = checks_.sum_of_counts("all_to_all", counts, n * n);
    const auto count = [&](int from, int to) { return counts[from * n + to]; };
    std::size_t sent = 0, received = 0;
    for (int s = 0; s < n; ++s) {
      sent += count(rank_, s);
      received += count(s, rank_);
    }
    checks_.expect_size("all_to_all", "in", in.size(), sent);
    checks_.expect_size("all_to_all", "out", out.size(), received);
    const nvtx_range range(label<T>(Op::all_to_all, total));
    const auto peers = meet(call<T>(Op::all_to_all, total, counts), in.data());
    std::size_t offset = 0;
    for (int s = 0; s < n; ++s) {
      std::size_t peer_offset = 0;  // where block rank_ starts in rank s's input
      for (int q = 0; q < rank_; ++q) peer_offset += count(s, q);
      copy(out.data() + offset, input<T>(peers[s]) + peer_offset, count(s, rank_));
      offset += count(s, rank_);
    }
    finish(peers);
  }

  template <SimulatedElement T>
  void broadcast(std::span<const T> in, std::span<T> out, int root) {
    checks_.expect_rank("broadcast", "root", root, size());
    if (rank_ == root) checks_.expect_size("broadcast", "in", in.size(), out.size());
    const nvtx_range range(label<T>(Op::broadcast, out.size()));
    const auto peers = meet(call<T>(Op::broadcast, out.size(), {}, root), rank_ == root ? in.data() : nullptr);
    copy(out.data(), input<T>(peers[root]), out.size());
    finish(peers);
  }

 private:
  using Op = tpx::detail::CollectiveOp;
  using CollectiveDescriptor = tpx::detail::CollectiveDescriptor;
  using Publication = tpx::detail::HostGroup::Publication;

  // What a rank publishes beside its input: read by peers between the meetings.
  struct peer_state {
    cudaEvent_t ready = nullptr, middle = nullptr, done = nullptr;
    const void* scratch = nullptr;  // all_reduce: this rank's reduced chunk
  };

  cudaStream_t stream() const { return resources_->stream(); }
  static const peer_state& state_of(const Publication& p) { return *static_cast<const peer_state*>(p.output); }
  template <class T>
  static const T* input(const Publication& p) {
    return static_cast<const T*>(p.input);
  }

  // Steps 1 and 2 of the top of the file.
  std::span<const Publication> meet(const CollectiveDescriptor& call, const void* input) {
    state_.ready = ready_.get();
    state_.middle = middle_.get();
    state_.done = done_.get();
    if (size() > 1) resources_->clock().start(stream());
    ready_.record(stream());
    const auto peers = group_->exchange(rank_, call, input, &state_);
    for (int s = 0; s < size(); ++s)
      if (s != rank_) TPX_CUDA_CHECK(cudaStreamWaitEvent(stream(), state_of(peers[s]).ready, 0));
    return peers;
  }

  // Step 3.
  void finish(std::span<const Publication> peers) {
    done_.record(stream());
    group_->wait_for_all(rank_);
    for (int s = 0; s < size(); ++s)
      if (s != rank_) TPX_CUDA_CHECK(cudaStreamWaitEvent(stream(), state_of(peers[s]).done, 0));
    // On the rank's own stream the whole collective is exposed; on its background lane, only the
    // wait at the task's join. A group of one rank copies: not timed.
    if (size() > 1)
      resources_->clock().stop(stream(), resources_->entered() ? communication_clock::total
                                                               : communication_clock::total_and_exposed);
  }

  template <class T>
  void copy(T* to, const T* from, std::size_t n) {
    if (n != 0 && to != from) TPX_CUDA_CHECK(cudaMemcpyAsync(to, from, n * sizeof(T), cudaMemcpyDeviceToDevice, stream()));
  }

  // to[i] = the sum (or max) over ranks, in rank order, of input_of(s)[i], for i in [0, n).
  template <class T, class InputOf>
  void reduce_over_ranks(std::span<const Publication> peers, InputOf input_of, std::size_t n, T* to, reduction op) {
    std::vector<const T*> inputs(peers.size());
    for (int s = 0; s < size(); ++s) inputs[s] = input_of(s);
    if (op == reduction::max)
      max_arrays<T>(stream(), static_cast<std::int64_t>(n), inputs, to);
    else
      sum_arrays<T>(stream(), static_cast<std::int64_t>(n), inputs, to);
  }

  // Where chunk s of an all_reduce of n elements starts.
  std::size_t chunk_begin(std::size_t n, int s) const {
    return n * static_cast<std::size_t>(s) / static_cast<std::size_t>(size());
  }

  template <class T>
  static CollectiveDescriptor call(Op op, std::size_t elements, std::span<const std::size_t> counts, int root = -1,
                                   reduction reduce = reduction::sum) {
    return {.op = op,
            .element = std::same_as<T, float> ? "float" : "bf16",
            .elements = elements,
            .counts_digest = counts.empty() ? 0 : tpx::detail::counts_digest(counts),
            .root = root,
            .reduce = reduce};
  }
  // The NVTX range: "all_reduce(max)<float> 4096 elements".
  template <class T>
  static std::string label(Op op, std::size_t elements, reduction reduce = reduction::sum) {
    std::string text(tpx::detail::op_name(op));
    if (reduce != reduction::sum) {  // appended, not `"(" + std::string(...)`: GCC 12 -O3 -Wrestrict
      text += '(';
      text += reduction_name(reduce);
      text += ')';
    }
    text += std::same_as<T, float> ? "<float> " : "<bf16> ";
    text += std::to_string(elements);
    text += " elements";
    return text;
  }

  tpx::detail::HostGroup* group_;
  int rank_;
  rank_resources* resources_;
  detail::collective_checks checks_;
  event ready_, middle_, done_;
  peer_state state_;
};

static_assert(Communicator<SimulatedCommunicator>,
              "SimulatedCommunicator must provide every collective of CommunicatorFor<C, float> and <C, bf16>");

}  // namespace tpx::cuda

// NcclCommunicator: one rank's handle on an NCCL communicator (the ranks of one set of mesh
// axes, ncclCommSplit from the world: nccl_mesh.hpp), with the typed collectives of
// tpx::CommunicatorFor plus send and recv, for ranks that each own a GPU.
//
// Types. The NCCL datatype of every call is nccl_type<T> of its buffers (nccl_check.hpp).
// Streams. Collectives run on the communicator's own stream: each waits (cudaStreamWaitEvent)
// for an event recorded on the rank's compute stream, so it sees the inputs the rank's kernels
// produced, and the compute stream waits for an event recorded after it, so later kernels see
// the outputs. Work queued before the collective on other streams overlaps it; the host never
// blocks except in barrier() and wait_all() (and in the checks below, when asked for).
// Counts. all_gather with equal counts is ncclAllGather, reduce_scatter with equal counts
// ncclReduceScatter; uneven counts (extents that do not divide) take grouped send/recv for the
// gather, and an all-reduce into a temporary for the scatter. all_to_all is grouped send/recv.
// bf16 is reduced by NCCL in bf16 steps, so sums of many ranks may differ from the host's
// fp32-accumulated ones in the last bits. all_reduce with reduction::max is ncclMax: exact, like
// the host's, except for NaN: NCCL's max (fmaxf, __hmax) returns the other operand when one is
// NaN, so a NaN input may be lost, where the host and simulated communicators return NaN.
// Failures. The communicator is nonblocking (ncclConfig_t::blocking = 0): no NCCL call can
// block the host forever. Every call is checked; an error throws nccl_error naming the call,
// NCCL's message and file:line. A call that returns ncclInProgress is waited for by polling
// ncclCommGetAsyncError. Each collective's completion event is kept until it has fired; every
// new call, barrier() and wait_all() poll them, and ncclCommGetAsyncError, and when a
// collective has not completed within the timeout, NCCL reports an asynchronous error, or
// another rank of this process has failed (`failure`, set by the launcher), the communicator
// is aborted (ncclCommAbort) and comm_error says which collective it was. Every collective is
// an NVTX range, and timed on the device (the rank's communication_clock: the collective on the
// communicator's stream, the compute stream's wait for it as exposed), unless the group has one
// rank.
// Checked collectives. NCCL matches calls by order and tells no rank that a peer has returned,
// so ranks whose control flow diverged (one calls all_reduce where a peer calls all_gather,
// skips a collective or returns early) hang until the timeout, or pair mismatched calls into
// garbage. With nccl_watch::check_collectives (launch_options::check_collectives, or
// TPX_CHECK_COLLECTIVES=1 in the environment of every rank) each collective first exchanges a
// record of the call with its group, as the MPI backend always does (comm/call_record.hpp): six
// 64-bit words per rank, ncclAllGather on the communicator's stream, copied to pinned host memory
// and polled (never waited for beyond the timeout). If any rank's record differs, every rank of
// the group throws the same comm_error naming the world ranks (with their hosts: the mesh gathers
// every rank's host name once, nccl_mesh.hpp), both calls and the collective's number on the
// group, before any data moves; a rank whose function has returned posts a
// "returned" record on each of its communicators (spmd_nccl.hpp), so peers waiting in a
// collective it never joins fail at once. The price is a small all-gather and a host wait per
// collective, which serializes the host with the GPU: a debugging mode, off by default (as
// PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL), and the timeout's message says how to turn it on.
// send and recv are checked in pairs: the two ranks swap their records (ncclSend and ncclRecv
// grouped) and both throw the same comm_error unless one sends what the other receives, of the
// same type and size (check_pair_records). A peer that calls a collective instead is not told:
// the pair's exchange waits until the timeout, whose message names the call.
// Ranks that wait in each other's collectives, each in an exchange of another group (a cycle),
// can only be seen from outside every group: given an exchange_watcher (nccl_watch::watcher:
// spmd(tpx::cuda_mpi, ...) passes its MPI heartbeat, spmd(tpx::cuda_launched, ...) its TCP one,
// spmd(tpx::cuda_devices, ...) its InProcessWatchdog; comm/exchange_watcher.hpp), each group
// exchange and each wait in one is reported to it, and the ranks fail with the picture of who
// waits where soon after the cycle forms (about a second across processes, as the MPI backend
// does; a tenth of one in one process).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tpx/comm/any_communicator.hpp"
#include "tpx/comm/call_record.hpp"
#include "tpx/comm/collective_descriptor.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/exchange_watcher.hpp"
#include "tpx/comm/group_name.hpp"
#include "tpx/comm/host_failure.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/collective_checks.hpp"
#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/nccl_check.hpp"
#include "tpx/cuda/nvtx.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/cuda/stream.hpp"

namespace tpx::cuda {

struct nccl_watch {
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // per collective, and per blocking wait
  const tpx::detail::HostFailure* failure = nullptr;             // another rank's failure, or none
  bool check_collectives = false;  // exchange a record of each call first (see the top of the file)
  // Told of every checked group exchange and wait (see the top of the file), or none; it outlives
  // the communicator. `group` is the communicator's id for it: its axis set's mask (nccl_mesh).
  tpx::detail::exchange_watcher* watcher = nullptr;
  unsigned group = 0;
};

class NcclCommunicator {
 public:
  // Takes ownership of `comm` (nonblocking, ready for use), whose members are `world_ranks` in
  // group-rank order and which `label` describes for messages ("mesh axis X"; may be empty);
  // orders itself with the stream of `resources`.
  NcclCommunicator(ncclComm_t comm, std::vector<int> world_ranks, const std::string& label,
                   rank_resources& resources, nccl_watch watch)
      : comm_(comm),
        resources_(&resources),
        watch_(watch),
        world_ranks_(std::move(world_ranks)),
        name_(tpx::detail::group_name(world_ranks_, label)),
        checks_("NCCL " + name_, 0) {
    int rank = 0, size = 0;
    check(ncclCommUserRank(comm_, &rank), "ncclCommUserRank", __FILE__, __LINE__);
    check(ncclCommCount(comm_, &size), "ncclCommCount", __FILE__, __LINE__);
    rank_ = rank;
    size_ = size;
    pair_sequence_.assign(static_cast<std::size_t>(size), 0);
    checks_ = detail::collective_checks("NCCL " + name_, rank);
    if (checking()) {
      void* words = nullptr;
      TPX_CUDA_CHECK(cudaMallocHost(&words, exchange_words() * sizeof(std::uint64_t)));
      exchange_host_.reset(static_cast<std::uint64_t*>(words));
      exchange_device_ = device_buffer<std::uint64_t>(exchange_words(), resources.pool(), stream_.get());
    }
  }
  NcclCommunicator(NcclCommunicator&& other) noexcept
      : comm_(std::exchange(other.comm_, nullptr)),
        resources_(other.resources_),
        watch_(other.watch_),
        world_ranks_(std::move(other.world_ranks_)),
        name_(std::move(other.name_)),
        checks_(std::move(other.checks_)),
        rank_(other.rank_),
        size_(other.size_),
        stream_(std::move(other.stream_)),
        ready_(std::move(other.ready_)),
        recorded_(std::move(other.recorded_)),
        pending_(std::move(other.pending_)),
        events_(std::move(other.events_)),
        sequence_(other.sequence_),
        exchange_host_(std::move(other.exchange_host_)),
        exchange_device_(std::move(other.exchange_device_)),
        exchanged_(std::move(other.exchanged_)),
        exchange_started_(other.exchange_started_),
        exchange_what_(std::move(other.exchange_what_)),
        returning_(other.returning_),
        hosts_(std::move(other.hosts_)),
        pair_sequence_(std::move(other.pair_sequence_)) {}
  NcclCommunicator& operator=(NcclCommunicator&&) = delete;
  // Waits (up to the timeout) for the queued collectives, then destroys the communicator; while
  // an exception unwinds, or after a failure, aborts it instead (peers may never arrive).
  ~NcclCommunicator() {
    if (comm_ == nullptr) return;
    if (std::uncaught_exceptions() > 0) {
      ncclCommAbort(comm_);
      return;
    }
    try {
      wait_all();
      check(ncclCommFinalize(comm_), "ncclCommFinalize", __FILE__, __LINE__);
      ncclCommDestroy(comm_);
    } catch (...) {
      if (comm_ != nullptr) ncclCommAbort(comm_);
    }
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  // Returns once every rank's earlier collectives on this communicator have completed.
  void barrier() {
    agree(tpx::detail::CollectiveDescriptor{});
    device_buffer<float> token(1, resources_->pool(), resources_->stream());
    run("barrier", [&] {
      check(ncclAllReduce(token.data(), token.data(), 1, ncclFloat32, ncclSum, comm_, stream_.get()), "ncclAllReduce",
            __FILE__, __LINE__);
    });
    wait_all();
  }

  // Blocks until every queued collective has completed (polling for errors and the timeout).
  void wait_all() {
    while (!pending_.empty()) {
      poll();
      std::this_thread::yield();
    }
  }

  template <NcclElement T>
  void all_gather(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    const std::size_t total = checks_.sum_of_counts("all_gather", counts, size_);
    checks_.expect_size("all_gather", "in", in.size(), counts[rank_]);
    checks_.expect_size("all_gather", "out", out.size(), total);
    agree_on<T>(Op::all_gather, total, counts);
    run(label<T>("all_gather", total), [&] {
      if (equal(counts)) {
        check(ncclAllGather(in.data(), out.data(), counts[0], nccl_type<T>, comm_, stream_.get()), "ncclAllGather",
              __FILE__, __LINE__);
        return;
      }
      std::vector<std::size_t> offsets = starts(counts);
      copy_local(out.data() + offsets[rank_], in.data(), in.size());
      grouped([&] {
        for (int s = 0; s < size_; ++s) {
          if (s == rank_) continue;
          send_to(in.data(), in.size(), s);
          receive_from(out.data() + offsets[s], counts[s], s);
        }
      });
    });
  }

  template <NcclElement T>
  void reduce_scatter(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    const std::size_t total = checks_.sum_of_counts("reduce_scatter", counts, size_);
    checks_.expect_size("reduce_scatter", "in", in.size(), total);
    checks_.expect_size("reduce_scatter", "out", out.size(), counts[rank_]);
    agree_on<T>(Op::reduce_scatter, total, counts);
    run(label<T>("reduce_scatter", total), [&] {
      if (equal(counts)) {
        check(ncclReduceScatter(in.data(), out.data(), counts[0], nccl_type<T>, ncclSum, comm_, stream_.get()),
              "ncclReduceScatter", __FILE__, __LINE__);
        return;
      }
      device_buffer<T> summed(total, resources_->pool(), stream_.get());
      check(ncclAllReduce(in.data(), summed.data(), total, nccl_type<T>, ncclSum, comm_, stream_.get()),
            "ncclAllReduce", __FILE__, __LINE__);
      copy_local(out.data(), summed.data() + starts(counts)[rank_], out.size());
    });
  }

  template <NcclElement T>
  void all_reduce(std::span<const T> in, std::span<T> out, reduction op = reduction::sum) {
    checks_.expect_size("all_reduce", "out", out.size(), in.size());
    const ncclRedOp_t nccl_op = op == reduction::max ? ncclMax : ncclSum;
    agree_on<T>(Op::all_reduce, in.size(), {}, -1, op);
    run(label<T>(op == reduction::max ? "all_reduce(max)" : "all_reduce", in.size()), [&] {
      check(ncclAllReduce(in.data(), out.data(), in.size(), nccl_type<T>, nccl_op, comm_, stream_.get()),
            "ncclAllReduce", __FILE__, __LINE__);
    });
  }

  template <NcclElement T>
  void all_to_all(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    const int n = size_;
    const std::size_t total = checks_.sum_of_counts("all_to_all", counts, n * n);
    const auto count = [&](int from, int to) { return counts[from * n + to]; };
    std::vector<std::size_t> send_at(n + 1, 0), receive_at(n + 1, 0);
    for (int s = 0; s < n; ++s) {
      send_at[s + 1] = send_at[s] + count(rank_, s);
      receive_at[s + 1] = receive_at[s] + count(s, rank_);
    }
    checks_.expect_size("all_to_all", "in", in.size(), send_at[n]);
    checks_.expect_size("all_to_all", "out", out.size(), receive_at[n]);
    agree_on<T>(Op::all_to_all, total, counts);
    run(label<T>("all_to_all", total), [&] {
      copy_local(out.data() + receive_at[rank_], in.data() + send_at[rank_], count(rank_, rank_));
      grouped([&] {
        for (int s = 0; s < n; ++s) {
          if (s == rank_) continue;
          send_to(in.data() + send_at[s], count(rank_, s), s);
          receive_from(out.data() + receive_at[s], count(s, rank_), s);
        }
      });
    });
  }

  template <NcclElement T>
  void broadcast(std::span<const T> in, std::span<T> out, int root) {
    checks_.expect_rank("broadcast", "root", root, size_);
    if (rank_ == root) checks_.expect_size("broadcast", "in", in.size(), out.size());
    agree_on<T>(Op::broadcast, out.size(), {}, root);
    run(label<T>("broadcast", out.size()), [&] {
      const T* from = rank_ == root ? in.data() : out.data();  // ignored off the root
      check(ncclBroadcast(from, out.data(), out.size(), nccl_type<T>, root, comm_, stream_.get()), "ncclBroadcast",
            __FILE__, __LINE__);
    });
  }

  // Point to point: `in` to group rank `peer`, which must call recv with as many elements.
  template <NcclElement T>
  void send(std::span<const T> in, int peer) {
    checks_.expect_rank("send", "peer", peer, size_);
    agree_with<T>(peer, Op::send, in.size());
    run(label<T>("send", in.size()), [&] { grouped([&] { send_to(in.data(), in.size(), peer); }); });
  }
  template <NcclElement T>
  void recv(std::span<T> out, int peer) {
    checks_.expect_rank("recv", "peer", peer, size_);
    agree_with<T>(peer, Op::recv, out.size());
    run(label<T>("recv", out.size()), [&] { grouped([&] { receive_from(out.data(), out.size(), peer); }); });
  }

  // Every world rank's host name, by an all-gather on this communicator, which must be the
  // world's (nccl_mesh.hpp calls it once, on every rank, right after creating it): `mine` is
  // this rank's (at most 63 bytes are kept). Polled like an exchange, never waited for beyond
  // the timeout.
  std::vector<std::string> gather_hosts(const std::string& mine) {
    constexpr std::size_t width = 64;
    const std::size_t bytes = width * static_cast<std::size_t>(size_);
    void* pinned = nullptr;
    TPX_CUDA_CHECK(cudaMallocHost(&pinned, bytes));
    const std::unique_ptr<char[], pinned_free> names(static_cast<char*>(pinned));
    std::fill_n(names.get(), bytes, '\0');
    char* const my_name = names.get() + width * static_cast<std::size_t>(rank_);
    std::copy_n(mine.data(), std::min(mine.size(), width - 1), my_name);
    device_buffer<char> all(bytes, resources_->pool(), stream_.get());
    char* const my_slot = all.data() + width * static_cast<std::size_t>(rank_);
    TPX_CUDA_CHECK(cudaMemcpyAsync(my_slot, my_name, width, cudaMemcpyHostToDevice, stream_.get()));
    check(ncclAllGather(my_slot, all.data(), width, ncclChar, comm_, stream_.get()), "ncclAllGather", __FILE__,
          __LINE__);
    TPX_CUDA_CHECK(cudaMemcpyAsync(names.get(), all.data(), bytes, cudaMemcpyDeviceToHost, stream_.get()));
    event arrived;
    arrived.record(stream_.get());
    const auto started = clock::now();
    while (!arrived.done()) {
      poll();
      if (clock::now() - started > watch_.timeout)
        abort("the exchange of host names on " + name_ + " was not joined by every rank within " +
              std::to_string(watch_.timeout.count()) + " ms");
      std::this_thread::yield();
    }
    std::vector<std::string> hosts;
    for (int r = 0; r < size_; ++r) hosts.emplace_back(names.get() + width * static_cast<std::size_t>(r));
    return hosts;
  }
  // Names the world ranks' hosts (gather_hosts' result) in this communicator's messages.
  void name_hosts(std::shared_ptr<const std::vector<std::string>> hosts) { hosts_ = std::move(hosts); }

  // When the SPMD function has returned on this rank and collectives are checked (spmd_nccl.hpp):
  // posts the "returned" record as the group's next exchange. return_checked() then polls it:
  // true once every peer's record has arrived and each returned too; comm_error on every rank
  // of the group if a peer called a collective instead, or after the timeout.
  void post_return() {
    if (!checking()) return;
    const auto words = std::bit_cast<std::array<std::uint64_t, call_record_words>>(tpx::detail::returned_record());
    post_exchange(words, "collective #" + std::to_string(++sequence_) + " on " + name_ + ", where this rank returned,");
    if (watch_.watcher != nullptr) watch_.watcher->posted(watch_.group, sequence_);
    returning_ = true;
  }
  bool return_checked() {
    if (!returning_) return true;
    if (!exchange_arrived()) return false;
    returning_ = false;
    tpx::detail::check_gathered_records(gathered_words(), name_, world_ranks_, hosts(), sequence_);
    return true;
  }

 private:
  using clock = std::chrono::steady_clock;
  using Op = tpx::detail::CollectiveOp;
  static constexpr std::size_t call_record_words = tpx::detail::call_record_words;

  struct pinned_free {
    void operator()(void* memory) const noexcept { cudaFreeHost(memory); }
  };

  struct pending_call {
    event completed;
    clock::time_point started;
    std::string what;
  };

  // Runs `enqueue` (the NCCL calls of one collective) ordered after the rank's compute stream,
  // and orders the compute stream after it.
  // While the rank's step is being recorded (a CUDA graph, step_graph.hpp; a group of one rank:
  // spmd/recorded_step.hpp) the events only order the streams: a recorded event never fires, so
  // none is polled or kept, and nothing is timed.
  template <class Enqueue>
  void run(const std::string& what, Enqueue&& enqueue) {
    const bool recording = resources_->recording();
    if (!recording) poll();
    const nvtx_range range(what);
    ready_.record(resources_->stream());
    stream_.wait_for(ready_);
    if (recording) {
      enqueue();
      recorded_.record(stream_.get());
      TPX_CUDA_CHECK(cudaStreamWaitEvent(resources_->stream(), recorded_.get(), 0));
      return;
    }
    // Timed where it is communication: not on a group of one rank, a copy the step pays for once
    // per collective in timing events.
    communication_clock& timer = resources_->clock();
    if (size_ > 1)
      timer.time(stream_.get(), communication_clock::total, enqueue);
    else
      enqueue();
    pending_call call{events_.take(), clock::now(), what};
    call.completed.record(stream_.get());
    const auto join = [&] { TPX_CUDA_CHECK(cudaStreamWaitEvent(resources_->stream(), call.completed.get(), 0)); };
    if (size_ == 1 || resources_->entered())  // from a background task: exposed only at its join
      join();
    else
      timer.time(resources_->stream(), communication_clock::exposed, join);
    pending_.push_back(std::move(call));
  }

  // Retires completed collectives; aborts on an asynchronous error, a timeout or a failed peer.
  void poll() {
    while (!pending_.empty() && pending_.front().completed.done()) {
      events_.give(std::move(pending_.front().completed));
      pending_.pop_front();
    }
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", __FILE__, __LINE__);
    if (state != ncclSuccess && state != ncclInProgress)
      abort(std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(state) + " (" +
            ncclGetLastError(comm_) + ")");
    if (watch_.failure != nullptr && watch_.failure->happened()) abort(watch_.failure->reason());
    if (!pending_.empty() && clock::now() - pending_.front().started > watch_.timeout)
      abort(pending_.front().what + " did not complete within " + std::to_string(watch_.timeout.count()) + " ms" +
            (watch_.check_collectives ? ""
                                      : "; set TPX_CHECK_COLLECTIVES=1 to find the rank that called a different "
                                        "collective or none"));
  }

  // The signature exchange (see the top of the file) for a collective on elements of type T.
  template <class T>
  void agree_on(Op op, std::size_t elements, std::span<const std::size_t> counts, int root = -1,
                reduction reduce = reduction::sum) {
    if (checking()) agree(tpx::detail::collective_call(op, nccl_type_name<T>, elements, counts, root, reduce));
  }
  // Returns once every rank of the group called `call`, else throws comm_error on every rank
  // saying who called what (or returned), or, after the timeout, which collective was not joined.
  void agree(const tpx::detail::CollectiveDescriptor& call) {
    if (!checking()) return;
    const std::uint64_t sequence = ++sequence_;
    const tpx::detail::CallRecord record = tpx::detail::record_of(call);
    tpx::detail::exchange_records(
        record, sequence, name_, world_ranks_, hosts(),
        [&](std::span<const std::uint64_t> mine, std::span<std::uint64_t> all) {
          post_exchange(mine, "collective #" + std::to_string(sequence) + " on " + name_ + ", " + describe(call) + ",");
          if (watch_.watcher != nullptr) watch_.watcher->posted(watch_.group, sequence);
          await_exchange({watch_.group, sequence, record});
          const std::span<const std::uint64_t> gathered = gathered_words();
          std::copy(gathered.begin(), gathered.end(), all.begin());
        });
  }

  // The pair's record exchange before a send or recv (see the top of the file): returns once the
  // peer called the matching recv or send, else throws comm_error on both (check_pair_records).
  template <class T>
  void agree_with(int peer, Op op, std::size_t elements) {
    if (!checking()) return;
    const auto mine = tpx::detail::record_of(tpx::detail::collective_call(op, nccl_type_name<T>, elements, {}, peer));
    const std::uint64_t number = ++pair_sequence_[static_cast<std::size_t>(peer)];
    const auto words = std::bit_cast<std::array<std::uint64_t, call_record_words>>(mine);
    post_pair_exchange(words, peer,
                       "point-to-point call #" + std::to_string(number) + " on " + name_ + " with rank " +
                           std::to_string(peer) + ", " + describe(mine) + ",");
    while (!exchange_arrived()) std::this_thread::yield();
    std::array<std::uint64_t, call_record_words> theirs;
    std::copy_n(exchange_host_.get() + call_record_words, call_record_words, theirs.begin());
    tpx::detail::check_pair_records(mine, rank_, std::bit_cast<tpx::detail::CallRecord>(theirs), peer, name_,
                                    world_ranks_, hosts(), number);
  }

  bool checking() const { return watch_.check_collectives && size_ > 1; }
  // The exchange's words: this rank's record, then every rank's in group-rank order.
  std::size_t exchange_words() const { return call_record_words * (1 + static_cast<std::size_t>(size_)); }
  std::span<const std::uint64_t> gathered_words() const {
    return {exchange_host_.get() + call_record_words, call_record_words * static_cast<std::size_t>(size_)};
  }

  // Queues an exchange of `mine` on the communicator's stream: up to the device, `swap(device)`
  // (the NCCL calls that leave the others' records after mine there), and `back` words after
  // mine back to pinned host memory. `what` names it in the timeout's message.
  template <class Swap>
  void post_exchange(std::span<const std::uint64_t> mine, std::size_t back, std::string what, Swap&& swap) {
    std::copy(mine.begin(), mine.end(), exchange_host_.get());
    exchange_started_ = clock::now();
    exchange_what_ = std::move(what);
    std::uint64_t* const device = exchange_device_.data();
    TPX_CUDA_CHECK(cudaMemcpyAsync(device, exchange_host_.get(), mine.size_bytes(), cudaMemcpyHostToDevice,
                                   stream_.get()));
    swap(device);
    TPX_CUDA_CHECK(cudaMemcpyAsync(exchange_host_.get() + call_record_words, device + call_record_words,
                                   back * sizeof(std::uint64_t), cudaMemcpyDeviceToHost, stream_.get()));
    exchanged_.record(stream_.get());
  }
  // The group's exchange: every rank's record, by ncclAllGather.
  void post_exchange(std::span<const std::uint64_t> mine, std::string what) {
    post_exchange(mine, gathered_words().size(), std::move(what), [&](std::uint64_t* device) {
      check(ncclAllGather(device, device + call_record_words, call_record_words, ncclUint64, comm_, stream_.get()),
            "ncclAllGather", __FILE__, __LINE__);
    });
  }
  // The pair's exchange with `peer`: its record, by ncclSend and ncclRecv grouped.
  void post_pair_exchange(std::span<const std::uint64_t> mine, int peer, std::string what) {
    post_exchange(mine, call_record_words, std::move(what), [&](std::uint64_t* device) {
      grouped([&] {
        check(ncclSend(device, call_record_words, ncclUint64, peer, comm_, stream_.get()), "ncclSend", __FILE__,
              __LINE__);
        check(ncclRecv(device + call_record_words, call_record_words, ncclUint64, peer, comm_, stream_.get()),
              "ncclRecv", __FILE__, __LINE__);
      });
    });
  }

  // Whether the posted exchange's words are on the host (never blocks); aborts as poll() does, or
  // when not every rank of the group has joined the exchange within the timeout.
  bool exchange_arrived() {
    poll();
    if (exchanged_.done()) return true;
    if (clock::now() - exchange_started_ > watch_.timeout)
      abort(exchange_what_ + " was not joined by every rank of the group within " +
            std::to_string(watch_.timeout.count()) +
            " ms: a rank still computes, waits in a collective of another group, or has stopped." +
            (watch_.watcher != nullptr ? watch_.watcher->last_heard() : ""));
    return false;
  }
  // Polls the posted group exchange until it has arrived, telling the watcher where this rank
  // waits (its verdict, on world rank 0, throws from here).
  void await_exchange(const tpx::detail::exchange_wait& where) {
    const clock::time_point start = clock::now();
    while (!exchange_arrived()) {
      if (watch_.watcher != nullptr) watch_.watcher->waiting(where, clock::now() - start);
      std::this_thread::yield();
    }
    if (watch_.watcher != nullptr) watch_.watcher->done_waiting();
  }

  // Checks one NCCL call on this communicator, waiting out ncclInProgress (nonblocking mode).
  void check(ncclResult_t status, const char* call, const char* file, int line) {
    const auto deadline = clock::now() + watch_.timeout;
    while (status == ncclInProgress) {
      if (clock::now() > deadline)
        abort(std::string(call) + " still in progress after " + std::to_string(watch_.timeout.count()) + " ms");
      if (watch_.failure != nullptr && watch_.failure->happened()) abort(watch_.failure->reason());
      std::this_thread::yield();
      ncclCommGetAsyncError(comm_, &status);
    }
    if (status != ncclSuccess)
      throw nccl_error(detail::nccl_message(status, call, file, line) + ": " + ncclGetLastError(comm_));
  }

  [[noreturn]] void abort(const std::string& why) {
    ncclCommAbort(std::exchange(comm_, nullptr));
    pending_.clear();
    const int me = world_ranks_[static_cast<std::size_t>(rank_)];
    throw comm_error("tpx: " + tpx::detail::ranks_on_hosts(std::span<const int>(&me, 1), hosts()) +
                     ": the NCCL communicator of " + name_ + " aborted: " + why);
  }

  // Every world rank's host, once named (name_hosts); else none, and messages name ranks only.
  std::span<const std::string> hosts() const {
    if (hosts_ == nullptr) return {};
    return *hosts_;
  }

  template <class Calls>
  void grouped(Calls&& calls) {
    TPX_NCCL_CHECK(ncclGroupStart());
    calls();
    check(ncclGroupEnd(), "ncclGroupEnd", __FILE__, __LINE__);
  }
  template <class T>
  void send_to(const T* data, std::size_t n, int peer) {
    if (n != 0) check(ncclSend(data, n, nccl_type<T>, peer, comm_, stream_.get()), "ncclSend", __FILE__, __LINE__);
  }
  template <class T>
  void receive_from(T* data, std::size_t n, int peer) {
    if (n != 0) check(ncclRecv(data, n, nccl_type<T>, peer, comm_, stream_.get()), "ncclRecv", __FILE__, __LINE__);
  }
  template <class T>
  void copy_local(T* to, const T* from, std::size_t n) {
    if (n != 0 && to != from)
      TPX_CUDA_CHECK(cudaMemcpyAsync(to, from, n * sizeof(T), cudaMemcpyDeviceToDevice, stream_.get()));
  }

  static bool equal(std::span<const std::size_t> counts) {
    for (std::size_t c : counts)
      if (c != counts[0]) return false;
    return true;
  }
  static std::vector<std::size_t> starts(std::span<const std::size_t> counts) {
    std::vector<std::size_t> at(counts.size(), 0);
    for (std::size_t s = 1; s < counts.size(); ++s) at[s] = at[s - 1] + counts[s - 1];
    return at;
  }
  template <class T>
  static std::string label(const char* op, std::size_t elements) {
    return std::string(op) + " " + std::to_string(elements) + " x " + std::to_string(sizeof(T)) + " B";
  }

  ncclComm_t comm_;
  rank_resources* resources_;
  nccl_watch watch_;
  std::vector<int> world_ranks_;
  std::string name_;  // "group {0,2} (mesh axis X)"
  detail::collective_checks checks_;
  int rank_ = 0, size_ = 1;
  cuda::stream stream_;
  event ready_;
  event recorded_;  // the end of a collective being recorded, for the compute stream to wait on
  std::deque<pending_call> pending_;
  event_pool events_{false};
  // The signature exchange, when collectives are checked (after stream_: freed on it).
  std::uint64_t sequence_ = 0;                                   // exchanges posted on the group
  std::unique_ptr<std::uint64_t[], pinned_free> exchange_host_;  // exchange_words(), pinned
  device_buffer<std::uint64_t> exchange_device_;                 // the same words on the device
  event exchanged_;                                              // the words are back on the host
  clock::time_point exchange_started_;
  std::string exchange_what_;  // "collective #3 on group {0,1} (mesh axis X), barrier,"
  bool returning_ = false;     // post_return's exchange is not yet checked
  std::shared_ptr<const std::vector<std::string>> hosts_;  // [world rank], once named
  std::vector<std::uint64_t> pair_sequence_;               // [group rank]: point-to-point exchanges
};

// The NcclCommunicator behind one of a DeviceRank's groups (for send, recv and wait_all, which
// any_communicator does not offer): `nccl_of(rank.group<X>()).send(...)`.
inline NcclCommunicator& nccl_of(any_communicator& group) {
  auto* model = dynamic_cast<communicator_model<NcclCommunicator>*>(&group);
  if (model == nullptr) throw std::invalid_argument("tpx: nccl_of: this group is not an NCCL communicator");
  return model->impl();
}

static_assert(Communicator<NcclCommunicator>,
              "NcclCommunicator must provide every collective of CommunicatorFor<C, float> and <C, bf16>");

}  // namespace tpx::cuda

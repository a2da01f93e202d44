// NcclCommunicator: one rank's handle on an NCCL communicator (the ranks of one set of mesh
// axes, ncclCommSplit from the world: nccl_mesh.hpp), with the typed collectives of
// tpx::CommunicatorFor plus send and recv, for ranks that each own a GPU.
//
// Types. The NCCL datatype of every call is nccl_type<T> of its buffers (nccl_check.hpp).
// Streams. Collectives run on the communicator's own stream: each waits (cudaStreamWaitEvent)
// for an event recorded on the rank's compute stream, so it sees the inputs the rank's kernels
// produced, and the compute stream waits for an event recorded after it, so later kernels see
// the outputs. Work queued before the collective on other streams overlaps it; the host never
// blocks except in barrier() and wait_all().
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
// is aborted (ncclCommAbort) and comm_error says which collective it was. A collective that a
// peer skips (rank-dependent control flow) is seen only through that timeout: NCCL matches calls
// by order and tells no rank that a peer has returned, where the host and simulated meshes fail
// it at once. Every collective is an NVTX range.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tpx/comm/any_communicator.hpp"
#include "tpx/comm/communicator.hpp"
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
};

class NcclCommunicator {
 public:
  // Takes ownership of `comm` (nonblocking, ready for use); orders itself with the stream of
  // `resources`.
  NcclCommunicator(ncclComm_t comm, rank_resources& resources, nccl_watch watch)
      : comm_(comm), resources_(&resources), watch_(watch), checks_("NCCL group", 0) {
    int rank = 0, size = 0;
    check(ncclCommUserRank(comm_, &rank), "ncclCommUserRank", __FILE__, __LINE__);
    check(ncclCommCount(comm_, &size), "ncclCommCount", __FILE__, __LINE__);
    rank_ = rank;
    size_ = size;
    checks_ = detail::collective_checks("NCCL group of " + std::to_string(size), rank);
  }
  NcclCommunicator(NcclCommunicator&& other) noexcept
      : comm_(std::exchange(other.comm_, nullptr)),
        resources_(other.resources_),
        watch_(other.watch_),
        checks_(std::move(other.checks_)),
        rank_(other.rank_),
        size_(other.size_),
        stream_(std::move(other.stream_)),
        ready_(std::move(other.ready_)),
        pending_(std::move(other.pending_)),
        spare_(std::move(other.spare_)) {}
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
    run(label<T>("send", in.size()), [&] { grouped([&] { send_to(in.data(), in.size(), peer); }); });
  }
  template <NcclElement T>
  void recv(std::span<T> out, int peer) {
    checks_.expect_rank("recv", "peer", peer, size_);
    run(label<T>("recv", out.size()), [&] { grouped([&] { receive_from(out.data(), out.size(), peer); }); });
  }

 private:
  using clock = std::chrono::steady_clock;

  struct pending_call {
    event completed;
    clock::time_point started;
    std::string what;
  };

  // Runs `enqueue` (the NCCL calls of one collective) ordered after the rank's compute stream,
  // and orders the compute stream after it.
  template <class Enqueue>
  void run(const std::string& what, Enqueue&& enqueue) {
    poll();
    const nvtx_range range(what);
    ready_.record(resources_->stream());
    stream_.wait_for(ready_);
    enqueue();
    pending_call call{next_event(), clock::now(), what};
    call.completed.record(stream_.get());
    TPX_CUDA_CHECK(cudaStreamWaitEvent(resources_->stream(), call.completed.get(), 0));
    pending_.push_back(std::move(call));
  }

  // Retires completed collectives; aborts on an asynchronous error, a timeout or a failed peer.
  void poll() {
    while (!pending_.empty() && pending_.front().completed.done()) {
      spare_.push_back(std::move(pending_.front().completed));
      pending_.pop_front();
    }
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", __FILE__, __LINE__);
    if (state != ncclSuccess && state != ncclInProgress)
      abort(std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(state) + " (" +
            ncclGetLastError(comm_) + ")");
    if (watch_.failure != nullptr && watch_.failure->happened()) abort(watch_.failure->reason());
    if (!pending_.empty() && clock::now() - pending_.front().started > watch_.timeout)
      abort(pending_.front().what + " did not complete within " + std::to_string(watch_.timeout.count()) + " ms");
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
    throw comm_error("tpx: NCCL communicator of rank " + std::to_string(rank_) + " (of " + std::to_string(size_) +
                     ") aborted: " + why);
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

  event next_event() {
    if (spare_.empty()) return event();
    event e = std::move(spare_.back());
    spare_.pop_back();
    return e;
  }

  ncclComm_t comm_;
  rank_resources* resources_;
  nccl_watch watch_;
  detail::collective_checks checks_;
  int rank_ = 0, size_ = 1;
  cuda::stream stream_;
  event ready_;
  std::deque<pending_call> pending_;
  std::vector<event> spare_;
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

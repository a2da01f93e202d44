// MpiCommunicator: one process's handle on an MPI communicator, providing the collectives of
// tpx::CommunicatorFor for fp32 and bf16, so that the typed ops run as processes under mpirun.
//
// Blocks move with MPI's variable-count collectives: all_gather is MPI_Allgatherv, all_to_all
// MPI_Alltoallv, broadcast MPI_Bcast. Reductions do not use MPI's reduction operators: the order
// in which an MPI library combines the ranks' values is its own (a tree, a ring, depending on
// sizes), so fp32 sums would differ in the last bits from the thread backend and between MPI
// libraries, and bf16 would need a user-defined operator that rounds after each step.
// Instead reduce_scatter sends each rank its block of every input with MPI_Alltoallv (the same
// bytes a ring reduce-scatter moves) and folds them locally in fp32, in group-rank order,
// rounding once (rank_fold.hpp, the host communicator's fold); all_reduce is that reduce-scatter
// over 1/size chunks followed by an MPI_Allgatherv of the reduced chunks (the bytes of a ring
// all-reduce). So every result, sums and maxima, fp32 and bf16, NaN included, is bit for bit the
// thread backend's on the same group. bf16 travels as MPI_UINT16_T: MPI only copies it.
//
// Before any of that, every collective runs a signature exchange: each rank contributes a record
// of the call it makes (kind, element type, counts and their digest, root, reduction:
// comm/call_record.hpp) to an MPI_Iallgather on the group, which the rank polls
// (comm/mpi_watchdog.hpp) until it completes or spmd_options::timeout passes. MPI matches a
// communicator's collectives by order, so a rank that skipped a collective meets its peers'
// exchange with its next call's record, and one that added or changed a call with that call's:
// every rank then has the same differing records and throws the same comm_error, naming the
// collective's number on the group, who called what and on which host, before any data moves. A
// rank whose SPMD function returned contributes a "returned" record instead (spmd_mpi.hpp), so
// peers waiting in a collective it never joined fail at once. On timeout the exchange throws
// naming the collective, the group and this rank; a failed exchange leaves the group unusable
// (later collectives on it throw). The exchange is the whole of barrier(). It costs one small
// MPI_Iallgather per collective (bench/README.md measures it); groups of one rank skip it.
//
// MPI counts are ints: a collective of more than INT_MAX elements throws std::invalid_argument,
// as do buffers that disagree with the counts (collective_arguments.hpp), before calling MPI.
// MPI failures throw comm_error naming the MPI call, the collective, the group, the rank and its
// host (mpi_errors.hpp). The handle owns its MPI_Comm (freed by the destructor), is move-only,
// and must be destroyed before MPI_Finalize.
#pragma once

#include <mpi.h>

#include <climits>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tpx/comm/collective_arguments.hpp"
#include "tpx/comm/collective_descriptor.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/group_name.hpp"
#include "tpx/comm/call_record.hpp"
#include "tpx/comm/mpi_errors.hpp"
#include "tpx/comm/mpi_watchdog.hpp"
#include "tpx/comm/rank_fold.hpp"
#include "tpx/core/bfloat16.hpp"
#include "tpx/kernels/reduction.hpp"

namespace tpx {

template <class T>
concept MpiElement = std::same_as<T, float> || std::same_as<T, bf16>;

class MpiCommunicator {
 public:
  // Takes ownership of `comm` and sets MPI_ERRORS_RETURN on it; `label` says what the group is,
  // for messages ("mesh axis X"; may be empty). `watchdog` (which must outlive the communicator)
  // times and watches its waits; `group_id` is the group's id there (its mesh axis set).
  MpiCommunicator(MPI_Comm comm, const std::string& label, detail::MpiWatchdog& watchdog,
                  unsigned group_id)
      : comm_(comm),
        world_ranks_(world_ranks_of(comm)),
        rank_(rank_of(comm)),
        name_(detail::group_name(world_ranks_, label)),
        caller_(name_ + ", rank " + std::to_string(rank_) + " (world " +
                std::to_string(world_ranks_[rank_]) + ") on host " +
                std::string(watchdog.hosts()[world_ranks_[rank_]])),
        arguments_(caller_),
        watchdog_(&watchdog),
        group_id_(group_id),
        records_(world_ranks_.size()) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  MpiCommunicator(MpiCommunicator&& other) noexcept
      : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
        world_ranks_(std::move(other.world_ranks_)),
        rank_(other.rank_),
        name_(std::move(other.name_)),
        caller_(std::move(other.caller_)),
        arguments_(std::move(other.arguments_)),
        watchdog_(other.watchdog_),
        group_id_(other.group_id_),
        sequence_(other.sequence_),
        mine_(other.mine_),
        records_(std::move(other.records_)),
        broken_(std::move(other.broken_)),
        scratch_(std::move(other.scratch_)),
        scratch_bytes_(std::exchange(other.scratch_bytes_, 0)) {}
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(MpiCommunicator&&) = delete;
  ~MpiCommunicator() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(world_ranks_.size()); }
  // The members in MPI_COMM_WORLD numbering, in group-rank order.
  std::span<const int> world_ranks() const noexcept { return world_ranks_; }

  // The signature exchange is the barrier: it completes only once every rank has joined it.
  void barrier() { agree(detail::CollectiveDescriptor{}); }

  // out = every rank's in, rank after rank; in may be this rank's block of out (in place).
  template <MpiElement T>
  void all_gather(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    const std::size_t total = arguments_.sum_of_counts(Op::all_gather, counts, size());
    arguments_.expect_size(Op::all_gather, "in", in.size(), counts[rank_]);
    arguments_.expect_size(Op::all_gather, "out", out.size(), total);
    const auto call = detail::collective_call<T>(Op::all_gather, total, counts);
    agree(call);
    gather_blocks(in, out, counts, call);
  }

  // out = this rank's block (counts[rank()] elements) of the sum over ranks of in.
  template <MpiElement T>
  void reduce_scatter(std::span<const T> in, std::span<T> out,
                      std::span<const std::size_t> counts) {
    const std::size_t total = arguments_.sum_of_counts(Op::reduce_scatter, counts, size());
    arguments_.expect_size(Op::reduce_scatter, "in", in.size(), total);
    arguments_.expect_size(Op::reduce_scatter, "out", out.size(), counts[rank_]);
    const auto call = detail::collective_call<T>(Op::reduce_scatter, total, counts);
    agree(call);
    fold_blocks<kernels::sum_reducer<compute_t<T>>>(in, out, counts, call);
  }

  // out = the sum (or, with reduction::max, the maximum) over ranks of in; in and out may be the
  // same memory.
  template <MpiElement T>
  void all_reduce(std::span<const T> in, std::span<T> out, reduction op = reduction::sum) {
    arguments_.expect_size(Op::all_reduce, "out", out.size(), in.size());
    const auto call = detail::collective_call<T>(Op::all_reduce, in.size(), {}, -1, op);
    agree(call);
    std::vector<std::size_t> chunks(static_cast<std::size_t>(size()));
    for (int s = 0; s < size(); ++s)
      chunks[s] = in.size() * (s + 1) / size() - in.size() * s / size();
    // This rank's reduced chunk goes straight to its place in out (in is no longer read once
    // fold_blocks has exchanged it), and the gather runs in place.
    const std::span<T> mine = out.subspan(in.size() * rank_ / size(), chunks[rank_]);
    if (op == reduction::max)
      fold_blocks<kernels::max_reducer<compute_t<T>>>(in, mine, chunks, call);
    else
      fold_blocks<kernels::sum_reducer<compute_t<T>>>(in, mine, chunks, call);
    gather_blocks(std::span<const T>(mine), out, chunks, call);
  }

  // Block s of this rank's in (counts[rank() * size() + s] elements) goes to rank s, which
  // stores it as its block rank() of out.
  template <MpiElement T>
  void all_to_all(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    const int n = size();
    const std::size_t total = arguments_.sum_of_counts(Op::all_to_all, counts, n * n);
    const auto call = detail::collective_call<T>(Op::all_to_all, total, counts);
    std::vector<std::size_t> sent(static_cast<std::size_t>(n)), received(sent.size());
    for (int s = 0; s < n; ++s) {
      sent[s] = counts[rank_ * n + s];
      received[s] = counts[s * n + rank_];
    }
    arguments_.expect_size(Op::all_to_all, "in", in.size(), sum(sent));
    arguments_.expect_size(Op::all_to_all, "out", out.size(), sum(received));
    agree(call);
    exchange_blocks(in.data(), sent, out.data(), received, call);
  }

  // out = root's in, on every rank; in is read on root only and may be out there.
  template <MpiElement T>
  void broadcast(std::span<const T> in, std::span<T> out, int root) {
    if (root < 0 || root >= size()) {
      arguments_.invalid(Op::broadcast,
                         "root " + std::to_string(root) + " is not a rank of the group");
    }
    if (rank_ == root) arguments_.expect_size(Op::broadcast, "in", in.size(), out.size());
    const auto call = detail::collective_call<T>(Op::broadcast, out.size(), {}, root);
    agree(call);
    if (rank_ == root && !in.empty() && in.data() != out.data())
      std::memcpy(out.data(), in.data(), in.size_bytes());
    check(MPI_Bcast(out.data(), mpi_count(out.size(), call), datatype<T>(), root, comm_),
          "MPI_Bcast", call);
  }

  // When the SPMD function has returned (spmd_mpi.hpp): posts this rank's "returned" record as
  // the group's next exchange and gives the request to wait for (MPI_REQUEST_NULL on a group of
  // one rank: nobody to tell). Once it completes, check_return throws comm_error if a peer called
  // a collective instead.
  MPI_Request post_return() {
    const std::uint64_t sequence = next_exchange(detail::returned_record());
    MPI_Request request = MPI_REQUEST_NULL;
    if (size() == 1) return request;
    detail::check_mpi(
        MPI_Iallgather(&mine_, detail::call_record_words, MPI_UINT64_T, records_.data(),
                       detail::call_record_words, MPI_UINT64_T, comm_, &request),
        "MPI_Iallgather",
        "returning from collective #" + std::to_string(sequence) + " on " + caller_);
    return request;
  }
  void check_return() const {
    detail::check_same_records(records_, name_, world_ranks_, watchdog_->hosts(), sequence_);
  }
  // "group {0,1} (mesh axis Y), collective #3": where post_return's exchange is, for a message.
  std::string exchange_name() const { return name_ + ", collective #" + std::to_string(sequence_); }

 private:
  using Op = detail::CollectiveOp;

  // Numbers this rank's next exchange on the group, which will carry `record`, and tells the
  // watchdog. Throws comm_error if an earlier exchange of the group failed.
  std::uint64_t next_exchange(const detail::CallRecord& record) {
    if (!broken_.empty()) {
      throw comm_error("tpx: " + name_ + " cannot be used after its collective failed: " + broken_);
    }
    watchdog_->posted(group_id_, ++sequence_);
    mine_ = record;
    return sequence_;
  }

  // The signature exchange before every collective (see the top of the file): returns once every
  // rank of the group called `call`, else throws comm_error on every rank saying who called what,
  // who returned instead, or, after the timeout, what this rank waited for. A failed exchange
  // breaks the group: later collectives on it throw.
  void agree(const detail::CollectiveDescriptor& call) {
    const std::uint64_t sequence = next_exchange(detail::record_of(call));
    if (size() == 1) return;
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(&mine_, detail::call_record_words, MPI_UINT64_T, records_.data(),
                         detail::call_record_words, MPI_UINT64_T, comm_, &request),
          "MPI_Iallgather", call);
    try {
      if (!watchdog_->wait(std::span(&request, 1), {group_id_, sequence, mine_},
                           [](std::size_t) {})) {
        throw comm_error("tpx: collective #" + std::to_string(sequence) + " on " + name_ + ", " +
                         describe(call) + ", timed out after " +
                         std::to_string(watchdog_->timeout().count()) + " ms on " +
                         watchdog_->me() + ": not every rank of the group called it." +
                         watchdog_->last_heard());
      }
      detail::check_same_records(records_, name_, world_ranks_, watchdog_->hosts(), sequence);
    } catch (const comm_error& e) {
      const std::string_view what = e.what();
      broken_ = what.starts_with("tpx: ") ? what.substr(5) : what;
      throw;
    }
  }

  template <MpiElement T>
  static MPI_Datatype datatype() {
    static_assert(sizeof(bf16) == sizeof(std::uint16_t), "bf16 travels as MPI_UINT16_T");
    return std::same_as<T, float> ? MPI_FLOAT : MPI_UINT16_T;
  }

  static int rank_of(MPI_Comm comm) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    return rank;
  }

  // The members of comm in MPI_COMM_WORLD numbering, in comm's rank order.
  static std::vector<int> world_ranks_of(MPI_Comm comm) {
    int size = 0;
    MPI_Comm_size(comm, &size);
    std::vector<int> mine(static_cast<std::size_t>(size)), world(mine.size());
    std::iota(mine.begin(), mine.end(), 0);
    MPI_Group group, world_group;
    MPI_Comm_group(comm, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_translate_ranks(group, size, mine.data(), world_group, world.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    return world;
  }

  static std::size_t sum(const std::vector<std::size_t>& counts) {
    return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  }

  // n as MPI's int count, or std::invalid_argument naming the collective.
  int mpi_count(std::size_t n, const detail::CollectiveDescriptor& call) const {
    if (n > static_cast<std::size_t>(INT_MAX)) {
      arguments_.invalid(call.op, describe(call) + " needs a count of " + std::to_string(n) +
                                      " elements, more than MPI's int counts hold");
    }
    return static_cast<int>(n);
  }

  // counts and their running offsets as MPI's ints.
  void mpi_counts(const std::vector<std::size_t>& counts, std::vector<int>& ints,
                  std::vector<int>& offsets, const detail::CollectiveDescriptor& call) const {
    ints.resize(counts.size());
    offsets.resize(counts.size());
    std::size_t offset = 0;
    for (std::size_t s = 0; s < counts.size(); ++s) {
      ints[s] = mpi_count(counts[s], call);
      offsets[s] = mpi_count(offset, call);
      offset += counts[s];
    }
    mpi_count(offset, call);
  }

  // The message is built only on failure: this runs for every MPI call.
  void check(int code, std::string_view mpi_call, const detail::CollectiveDescriptor& call) const {
    if (code != MPI_SUCCESS) detail::check_mpi(code, mpi_call, describe(call) + " on " + caller_);
  }

  // out = every rank's in, block after block (MPI_Allgatherv).
  template <MpiElement T>
  void gather_blocks(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts,
                     const detail::CollectiveDescriptor& call) {
    std::vector<int> ints, offsets;
    mpi_counts({counts.begin(), counts.end()}, ints, offsets, call);
    const bool in_place = in.data() == out.data() + offsets[rank_];
    check(MPI_Allgatherv(in_place ? MPI_IN_PLACE : in.data(), ints[rank_], datatype<T>(),
                         out.data(), ints.data(), offsets.data(), datatype<T>(), comm_),
          "MPI_Allgatherv", call);
  }

  // Sends sent[s] elements from `from` to each rank s, in rank order, and receives received[s]
  // from each into `to` (MPI_Alltoallv).
  template <MpiElement T>
  void exchange_blocks(const T* from, const std::vector<std::size_t>& sent, T* to,
                       const std::vector<std::size_t>& received,
                       const detail::CollectiveDescriptor& call) {
    std::vector<int> send_counts, send_offsets, receive_counts, receive_offsets;
    mpi_counts(sent, send_counts, send_offsets, call);
    mpi_counts(received, receive_counts, receive_offsets, call);
    check(MPI_Alltoallv(from, send_counts.data(), send_offsets.data(), datatype<T>(), to,
                        receive_counts.data(), receive_offsets.data(), datatype<T>(), comm_),
          "MPI_Alltoallv", call);
  }

  // out = this rank's block (counts[rank()] elements) of the fold with R over ranks of in: every
  // rank's copy of that block comes here, then folds in rank order (rank_fold.hpp).
  template <class R, MpiElement T>
  void fold_blocks(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts,
                   const detail::CollectiveDescriptor& call) {
    const std::size_t mine = counts[rank_];
    T* const blocks = scratch<T>(mine * static_cast<std::size_t>(size()));
    exchange_blocks(in.data(), {counts.begin(), counts.end()}, blocks,
                    std::vector<std::size_t>(static_cast<std::size_t>(size()), mine), call);
    detail::fold_ranks<R>(
        size(), [&](int s) { return blocks + mine * static_cast<std::size_t>(s); }, mine,
        out.data());
  }

  // Room for `elements` T, kept from call to call and grown when too small, not initialized: a
  // fresh vector per reduction spent more time faulting in and zeroing its pages than MPI spent
  // moving the data (64 MiB all_reduce on 2 processes: 108 ms against 11 ms for an all_gather
  // of the same size; bench/README.md, "MPI processes against threads").
  template <MpiElement T>
  T* scratch(std::size_t elements) {
    const std::size_t bytes = elements * sizeof(T);
    if (bytes > scratch_bytes_) {
      scratch_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
      scratch_bytes_ = bytes;
    }
    return reinterpret_cast<T*>(scratch_.get());
  }

  MPI_Comm comm_;
  std::vector<int> world_ranks_;
  int rank_;
  std::string name_;    // "group {0,2} (mesh axis X)"
  std::string caller_;  // "group {0,2} (mesh axis X), rank 1 (world 2) on host node3"
  detail::CollectiveArguments arguments_;
  detail::MpiWatchdog* watchdog_;
  unsigned group_id_;
  std::uint64_t sequence_ = 0;               // exchanges posted on the group
  detail::CallRecord mine_;                  // this rank's record in the current exchange
  std::vector<detail::CallRecord> records_;  // [group rank]: every rank's record in it
  std::string broken_;                       // why the group failed, if it did
  std::unique_ptr<std::byte[]> scratch_;     // reductions' exchanged blocks (scratch())
  std::size_t scratch_bytes_ = 0;
};

static_assert(Communicator<MpiCommunicator>,
              "MpiCommunicator must provide every collective of CommunicatorFor for fp32 and bf16");

}  // namespace tpx

// recording_space and recording_group: a stand-in for the CUDA device space and a one-rank
// communicator, which record on the thread's replay_tape (replay_tape.hpp) while a step is being
// recorded, as stream capture does, and otherwise run at once. With tape_backend set on the rank,
// tpx::recorded_step records the work on the tape and replays it, so a host test runs a step
// exactly as a CUDA graph would: once recorded, then replayed with the arguments of the recording.
//
// Its functions are host_space's, so a replay that reads what it should computes what the host
// backend computes, bit for bit, and one that does not (a host value frozen into the recording,
// a buffer the replay does not re-zero) shows in the numbers. Like the device space, it keeps
// its memory from the host (host_accessible is false) and refuses, while recording, the copies to
// and from the host that a replay would repeat or skip. Memory made while recording starts as
// all-one bits (NaN in floating point), as a graph's pool holds what its last user left, and
// buffers made by make_buffer are zeroed by a recorded operation, as a memset node does.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <tpx/comm/any_communicator.hpp>
#include <tpx/tensor/host_buffer.hpp>
#include <tpx/tensor/host_space.hpp>
#include <utility>
#include <vector>

#include "device_like_space.hpp"
#include "replay_tape.hpp"

namespace tpx::testing {

// The storage of recording_space: host memory, entered in the recording's ledger when made or
// freed while recording (as cuda::device_buffer is), and kept by the tape when freed then.
template <class T>
class recording_buffer {
 public:
  recording_buffer() = default;
  // n zeros: set at once, or by a recorded operation while recording.
  static recording_buffer zeroed(std::size_t n) {
    recording_buffer b(n);
    T* p = b.data_;
    if (n > 0) replay_tape::run_or_record([p, n] { std::fill_n(p, n, T{}); });
    return b;
  }
  // n elements of unspecified value, to be overwritten.
  static recording_buffer for_overwrite(std::size_t n) { return recording_buffer(n); }

  recording_buffer(const recording_buffer& other) : recording_buffer(other.size_) {
    replay_tape::copy(other.data_, size_, data_);
  }
  recording_buffer(recording_buffer&& other) noexcept { swap(*this, other); }
  recording_buffer& operator=(recording_buffer other) noexcept {
    swap(*this, other);
    return *this;
  }
  ~recording_buffer() { release(); }

  friend void swap(recording_buffer& a, recording_buffer& b) noexcept {
    std::swap(a.storage_, b.storage_);
    std::swap(a.data_, b.data_);
    std::swap(a.size_, b.size_);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  explicit recording_buffer(std::size_t n) : size_(n) {
    if (n == 0) return;
    storage_ = std::make_shared<host_buffer<T>>(n);
    data_ = storage_->data();
    if (replay_tape::recording() != nullptr) std::memset(static_cast<void*>(data_), 0xff, bytes());
    if (recording_ledger* ledger = recording_ledger::current()) ledger->made(data_, bytes());
  }

  void release() {
    if (!storage_) return;
    if (recording_ledger* ledger = recording_ledger::current()) ledger->freed(data_, bytes());
    if (replay_tape* tape = replay_tape::recording())
      tape->keep(std::move(storage_));
    else
      storage_.reset();
  }

  std::size_t bytes() const { return size_ * sizeof(T); }

  std::shared_ptr<host_buffer<T>> storage_;
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// host_space's functions, each run at once or recorded on the thread's tape; those the device
// space lacks are deleted (device_like_space.hpp).
struct recording_space : device_like_space {
  template <class T>
  using buffer = recording_buffer<T>;

  template <class T>
  static buffer<T> make_buffer(const rank_context&, std::size_t n) {
    return buffer<T>::zeroed(n);
  }
  template <class T>
  static buffer<T> make_buffer_for_overwrite(const rank_context&, std::size_t n) {
    return buffer<T>::for_overwrite(n);
  }

  template <class T, std::size_t N>
  static void copy_box(const rank_context& ctx, const T* src, const index_array<N>& src_shape,
                       const index_array<N>& src_start, T* dst, const index_array<N>& dst_shape,
                       const index_array<N>& dst_start, const index_array<N>& box) {
    replay_tape::run_or_record([=, &ctx] {
      host_space::copy_box(ctx, src, src_shape, src_start, dst, dst_shape, dst_start, box);
    });
  }

  template <class T>
  static void gemm(const rank_context& ctx, bool trans_a, bool trans_b, std::int64_t m,
                   std::int64_t n, std::int64_t k, float alpha, const T* a, std::int64_t lda,
                   const T* b, std::int64_t ldb, float beta, T* c, std::int64_t ldc) {
    replay_tape::run_or_record([=, &ctx] {
      host_space::gemm(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    });
  }

  template <class T>
  static void gemm_batched(const rank_context& ctx, bool trans_a, bool trans_b, std::int64_t m,
                           std::int64_t n, std::int64_t k, float alpha, const T* a,
                           std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb,
                           std::int64_t stride_b, float beta, T* c, std::int64_t ldc,
                           std::int64_t stride_c, std::int64_t batch) {
    replay_tape::run_or_record([=, &ctx] {
      host_space::gemm_batched(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb,
                               stride_b, beta, c, ldc, stride_c, batch);
    });
  }

  template <class T>
  static void gemm_gelu(const rank_context& ctx, bool trans_a, bool trans_b, std::int64_t m,
                        std::int64_t n, std::int64_t k, const T* a, std::int64_t lda, const T* b,
                        std::int64_t ldb, T* out, T* pre) {
    replay_tape::run_or_record([=, &ctx] {
      host_space::gemm_gelu(ctx, trans_a, trans_b, m, n, k, a, lda, b, ldb, out, pre);
    });
  }
  template <class T>
  static void gemm_gelu_backward(const rank_context& ctx, bool trans_a, bool trans_b,
                                 std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
                                 std::int64_t lda, const T* b, std::int64_t ldb, const T* pre,
                                 T* out) {
    replay_tape::run_or_record([=, &ctx] {
      host_space::gemm_gelu_backward(ctx, trans_a, trans_b, m, n, k, a, lda, b, ldb, pre, out);
    });
  }

  template <class F, class Out, class... In>
  static void transform(const rank_context& ctx, std::size_t n, const F& f, Out* out,
                        const In*... in) {
    replay_tape::run_or_record([=, &ctx] { host_space::transform(ctx, n, f, out, in...); });
  }

  template <class T>
  static void to_host(const rank_context& ctx, const T* src, std::size_t n, T* dst) {
    refuse_while_recording(ctx, "reads " + std::to_string(n * sizeof(T)) + " bytes on the host");
    host_space::to_host(ctx, src, n, dst);
  }
  template <class T>
  static void from_host(const rank_context& ctx, const T* src, std::size_t n, T* dst) {
    refuse_while_recording(ctx, "copies " + std::to_string(n * sizeof(T)) + " bytes from the host");
    host_space::from_host(ctx, src, n, dst);
  }

  template <class G>
  static void adamw(const rank_context& ctx, std::size_t n, const kernels::adamw_update& update,
                    const float* step, const float* scale, float* p, const G* g, float* m,
                    float* v) {
    replay_tape::run_or_record(
        [=, &ctx] { host_space::adamw(ctx, n, update, step, scale, p, g, m, v); });
  }

  template <class T>
  static void sum_of_squares(const rank_context& ctx, std::size_t n, const T* x, float* out) {
    replay_tape::run_or_record([=, &ctx] { host_space::sum_of_squares(ctx, n, x, out); });
  }

  template <class R, class Term>
  static void reduce_rows(const rank_context& ctx, std::int64_t rows, std::int64_t cols,
                          const Term& term, float* out) {
    replay_tape::run_or_record(
        [=, &ctx] { host_space::reduce_rows<R>(ctx, rows, cols, term, out); });
  }

  template <class Fn>
  static void for_each_element(const rank_context& ctx, std::int64_t rows, std::int64_t cols,
                               const Fn& fn) {
    replay_tape::run_or_record([=, &ctx] { host_space::for_each_element(ctx, rows, cols, fn); });
  }

  template <class Term>
  static void sum_columns(const rank_context& ctx, std::int64_t rows, std::int64_t cols,
                          const Term& term, float* out) {
    replay_tape::run_or_record(
        [=, &ctx] { host_space::sum_columns(ctx, rows, cols, term, out); });
  }

  template <class Index, class Term>
  static void scatter_add_rows(const rank_context& ctx, std::int64_t rows, std::int64_t cols,
                               std::int64_t out_rows, const Index& index, const Term& term,
                               float* out) {
    replay_tape::run_or_record(
        [=, &ctx] { host_space::scatter_add_rows(ctx, rows, cols, out_rows, index, term, out); });
  }

  template <class T>
  static void fused_attention_forward(const rank_context& ctx, std::int64_t sequences,
                                      kernels::attention_shape shape, int e, float scale,
                                      const T* q, const T* k, const T* v, T* out, float* lse) {
    replay_tape::run_or_record([=, &ctx] {
      host_space::fused_attention_forward(ctx, sequences, shape, e, scale, q, k, v, out, lse);
    });
  }
  template <class T>
  static void fused_attention_backward(const rank_context& ctx, std::int64_t sequences,
                                       kernels::attention_shape shape, int e, float scale,
                                       const T* q, const T* k, const T* v, const T* dout,
                                       const float* lse, const float* delta, T* dq, T* dk, T* dv) {
    replay_tape::run_or_record([=, &ctx] {
      host_space::fused_attention_backward(ctx, sequences, shape, e, scale, q, k, v, dout, lse,
                                           delta, dq, dk, dv);
    });
  }

 private:
  // A crossing to or from the host, refused while recording as the device space refuses it.
  static void refuse_while_recording(const rank_context& ctx, const std::string& crossing) {
    if (replay_tape::recording() != nullptr)
      throw std::logic_error("recording_space: rank " + std::to_string(ctx.world_rank()) +
                             ": a step being recorded " + crossing);
  }
};

// The communicator of a group of one rank (every group of a 1x1 mesh): each collective is a copy
// of `in` to `out`, run at once or recorded, as NCCL's calls are captured into a graph.
class recording_group {
 public:
  int size() const { return 1; }
  int rank() const { return 0; }
  void barrier() {}
  template <class T>
  void all_gather(std::span<const T> in, std::span<T> out, std::span<const std::size_t>) {
    copy(in, out);
  }
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out, std::span<const std::size_t>) {
    copy(in, out);
  }
  template <class T>
  void all_reduce(std::span<const T> in, std::span<T> out, reduction = reduction::sum) {
    copy(in, out);
  }
  template <class T>
  void all_to_all(std::span<const T> in, std::span<T> out, std::span<const std::size_t>) {
    copy(in, out);
  }
  template <class T>
  void broadcast(std::span<const T> in, std::span<T> out, int) {
    copy(in, out);
  }

 private:
  template <class T>
  static void copy(std::span<const T> in, std::span<T> out) {
    if (in.size() != out.size())
      throw std::logic_error("recording_group: a collective of one rank with " +
                             std::to_string(in.size()) + " elements in and " +
                             std::to_string(out.size()) + " out");
    if (in.data() != out.data()) replay_tape::copy(in.data(), in.size(), out.data());
  }
};

// A rank alone in its world, on the axes of a one-rank mesh (taken from a rank of that mesh,
// e.g. one tpx::spmd on the host gives), whose every group is a recording_group and whose backend
// records on tapes: what tensors of recording_space and tpx::recorded_step need.
struct recording_rank {
  explicit recording_rank(const std::vector<axis_place>& axes)
      : groups(std::size_t{1} << axes.size(), &group), rank(0, 1, axes, groups) {
    rank.set_backend(&backend);
  }
  communicator_model<recording_group> group{recording_group{}};
  std::vector<any_communicator*> groups;
  tape_backend backend;
  rank_context rank;
};

}  // namespace tpx::testing

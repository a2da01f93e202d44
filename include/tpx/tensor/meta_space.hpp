// meta_space: tensors with shapes but no values, for running a program to learn what it would
// take (spmd/dry_run.hpp) rather than what it computes, as PyTorch's meta device and JAX's
// abstract evaluation do.
//
// A meta tensor's buffer is a range of reserved address space (mmap with PROT_NONE, no memory
// behind it), counted on the rank's memory_meter as a real tensor's memory would be: so the
// meter's peak is the program's, at any size, on any machine. Reading or writing an element
// faults, and nothing tries: every function of the space does nothing, except that the products
// add their floating-point operations to the rank's meta_counter (the backend state a dry run
// gives each rank). The space offers what the CUDA device space offers (cuda/device_space.hpp),
// the whole-row kernels of the norms and the loss included, so that the layers take the GPU's
// paths and make the GPU's tensors; and like it, it is not host_accessible (Tensor::local() does
// not compile), to_host leaves the host's memory as it was and from_host reads nothing.
//
// FLOPs counted: 2 m n k per product (each of a batch), the same for the products that the GELU
// epilogues finish; fused attention (nn/fused_attention.hpp) over the causally visible query-key
// pairs only, T (T + 1) / 2 per sequence, 2 E per pair and product: 2 products forward (S = Q K^T,
// O = P V), 7 backward, as tpx's two-pass kernels run them (S and dP for the dq pass with dQ; S,
// dP, dV and dK again in the dk-dv pass; cuda/kernels/flash_attention.hpp). The elementwise and
// row passes are not counted: they are bound by memory, not arithmetic.
#pragma once

#include <sys/mman.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tpx/kernels/fused_attention.hpp"
#include "tpx/kernels/grid_terms.hpp"
#include "tpx/kernels/optimizer.hpp"
#include "tpx/spmd/rank_context.hpp"
#include "tpx/tensor/allocation_error.hpp"
#include "tpx/tensor/memory_meter.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

// What a rank's meta tensors would have computed (the products' FLOPs), kept as the rank's
// backend state by spmd(tpx::dry_run).
class meta_counter : public backend_state {
 public:
  double matrix_flops = 0;
};

template <class T>
class meta_buffer {
 public:
  meta_buffer() = default;
  meta_buffer(std::size_t n, memory_meter* meter) : size_(n), meter_(meter) {
    if (n == 0) return;
    void* p = mmap(nullptr, bytes(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw allocation_error(n, sizeof(T), "meta memory (address space to reserve)");
    data_ = static_cast<T*>(p);
    if (meter_ != nullptr) meter_->add(static_cast<std::int64_t>(bytes()));
  }
  meta_buffer(const meta_buffer& other) : meta_buffer(other.size_, other.meter_) {}
  meta_buffer(meta_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), meter_(other.meter_) {}
  meta_buffer& operator=(meta_buffer other) noexcept {
    swap(*this, other);
    return *this;
  }
  ~meta_buffer() {
    if (data_ == nullptr) return;
    munmap(data_, bytes());
    if (meter_ != nullptr) meter_->remove(static_cast<std::int64_t>(bytes()));
  }
  friend void swap(meta_buffer& a, meta_buffer& b) noexcept {
    std::swap(a.data_, b.data_);
    std::swap(a.size_, b.size_);
    std::swap(a.meter_, b.meter_);
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
  std::size_t bytes() const { return size_ * sizeof(T); }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  memory_meter* meter_ = nullptr;
};

struct meta_space {
  static constexpr bool host_accessible = false;

  template <class T>
  using buffer = meta_buffer<T>;

  template <class T>
  static buffer<T> make_buffer(const rank_context& ctx, std::size_t n) {
    return buffer<T>(n, &ctx.memory());
  }
  template <class T>
  static buffer<T> make_buffer_for_overwrite(const rank_context& ctx, std::size_t n) {
    return buffer<T>(n, &ctx.memory());
  }

  template <class T, std::size_t N>
  static void copy_box(const rank_context&, const T*, const std::array<std::int64_t, N>&,
                       const std::array<std::int64_t, N>&, T*, const std::array<std::int64_t, N>&,
                       const std::array<std::int64_t, N>&, const std::array<std::int64_t, N>&) {}

  template <class T>
  static void gemm(const rank_context& ctx, bool, bool, std::int64_t m, std::int64_t n, std::int64_t k, float,
                   const T*, std::int64_t, const T*, std::int64_t, float, T*, std::int64_t) {
    count_products(ctx, 1, m, n, k);
  }
  template <class T>
  static void gemm_batched(const rank_context& ctx, bool, bool, std::int64_t m, std::int64_t n, std::int64_t k,
                           float, const T*, std::int64_t, std::int64_t, const T*, std::int64_t, std::int64_t,
                           float, T*, std::int64_t, std::int64_t, std::int64_t batch) {
    count_products(ctx, batch, m, n, k);
  }
  template <class T>
  static void gemm_gelu(const rank_context& ctx, bool, bool, std::int64_t m, std::int64_t n, std::int64_t k,
                        const T*, std::int64_t, const T*, std::int64_t, T*, T*) {
    count_products(ctx, 1, m, n, k);
  }
  template <class T>
  static void gemm_gelu_backward(const rank_context& ctx, bool, bool, std::int64_t m, std::int64_t n,
                                 std::int64_t k, const T*, std::int64_t, const T*, std::int64_t, const T*, T*) {
    count_products(ctx, 1, m, n, k);
  }

  template <class F, class Out, class... In>
  static void transform(const rank_context&, std::size_t, const F&, Out*, const In*...) {}
  template <class T>
  static void to_host(const rank_context&, const T*, std::size_t, T*) {}
  template <class T>
  static void from_host(const rank_context&, const T*, std::size_t, T*) {}
  template <class T, std::size_t N>
  static void fill_normal(const rank_context&, T*, const std::array<std::int64_t, N>&,
                          const std::array<std::int64_t, N>&, const std::array<std::int64_t, N>&, std::uint64_t,
                          float) {}
  template <class G>
  static void adamw(const rank_context&, std::size_t, const kernels::adamw_update&, const float*, const float*,
                    float*, const G*, float*, float*) {}
  template <class T>
  static void sum_of_squares(const rank_context&, std::size_t, const T*, float*) {}

  template <class R, class Term>
  static void reduce_rows(const rank_context&, std::int64_t, std::int64_t, const Term&, float*) {}
  template <class Fn>
  static void for_each_element(const rank_context&, std::int64_t, std::int64_t, const Fn&) {}
  template <class Term>
  static void sum_columns(const rank_context&, std::int64_t, std::int64_t, const Term&, float*) {}
  template <class Index, class Term>
  static void scatter_add_rows(const rank_context&, std::int64_t, std::int64_t, std::int64_t, const Index&,
                               const Term&, float*) {}

  template <class T, class W>
  static void rmsnorm_rows(const rank_context&, std::int64_t, std::int64_t, const T*, const W*, float, T*,
                           float*) {}
  template <class T, class W>
  static void rmsnorm_rows_backward(const rank_context&, std::int64_t, std::int64_t, const T*, const W*,
                                    const float*, const T*, T*, float*) {}
  template <class T>
  static void softmax_stats_rows(const rank_context&, std::int64_t, std::int64_t, const T*, float*, float*) {}
  template <class T>
  static void cross_entropy_gradient_rows(const rank_context&, std::int64_t, std::int64_t, const T*, const float*,
                                          const float*, kernels::token_at, std::int64_t, float, T*) {}

  template <class T>
  static void fused_attention_forward(const rank_context& ctx, std::int64_t sequences,
                                      kernels::attention_shape shape, int e, float, const T*, const T*,
                                      const T*, T*, float*) {
    count_attention(ctx, sequences, shape, e, forward_attention_products);
  }
  template <class T>
  static void fused_attention_backward(const rank_context& ctx, std::int64_t sequences,
                                       kernels::attention_shape shape, int e, float, const T*, const T*,
                                       const T*, const T*, const float*, const float*, T*, T*, T*) {
    count_attention(ctx, sequences, shape, e, backward_attention_products);
  }

  // The products the fused attention kernels run over each visible query-key pair.
  static constexpr int forward_attention_products = 2;
  static constexpr int backward_attention_products = 7;

 private:
  static void count(const rank_context& ctx, double flops) {
    if (auto* counter = dynamic_cast<meta_counter*>(ctx.backend())) counter->matrix_flops += flops;
  }
  static void count_products(const rank_context& ctx, std::int64_t batch, std::int64_t m, std::int64_t n,
                             std::int64_t k) {
    count(ctx, 2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
                   static_cast<double>(k));
  }
  // Query t of a block sees first + t + 1 keys.
  static void count_attention(const rank_context& ctx, std::int64_t sequences, kernels::attention_shape shape,
                              int e, int products) {
    const auto t_len = static_cast<double>(shape.queries.t_len);
    const double pairs = t_len * static_cast<double>(shape.first) + t_len * (t_len + 1) / 2;
    count(ctx, static_cast<double>(sequences) * pairs * 2.0 * e * products);
  }
};

// Whether tensors of Space hold values: false for meta_space (and spaces derived from it), so
// that work done only to fill tensors (values made on the host for initialization) can be
// skipped where it would be thrown away.
template <class Space>
inline constexpr bool holds_values = !std::is_base_of_v<meta_space, Space>;

// A tensor of meta_space: tpx::Tensor's shape without its values.
template <class T, class... Spec>
using MetaTensor = BasicTensor<meta_space, T, Spec...>;

}  // namespace tpx

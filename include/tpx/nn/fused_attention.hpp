// Fused causal attention: nn/attention.hpp's layer without the [T, S] probabilities, computed
// tile by tile with an online softmax and recomputed in the backward pass (FlashAttention), so
// its memory is O(T) per head where the reference's is O(T^2).
//
//   // q[B_X, T, H_Y, E], k and v [B_X, S, H_Y, E]
//   auto fwd = tpx::nn::fused_causal_attention_forward(q, k, v);
//   // fwd.out: [B_X, H_Y, T, E]; fwd.lse: [B_X, H_Y, T], the log of each row's softmax sum
//   auto g = tpx::nn::fused_causal_attention_backward(q, k, v, fwd.out, fwd.lse, dout);
//
// Operands, results and their sharding are the reference's (nn/attention.hpp): dims found by
// name, batch dims (heads, batch) split alike on q, k and v so that nothing is communicated, T,
// S and E whole; results in [batch dims in q's order, T, E]. An operand whose batch dims do not
// lead is first copied into that order (ops/permute.hpp), as einsum does for the reference.
// The math (kernels/fused_attention.hpp) is one definition for the host loops
// (tensor/host_fused_attention.hpp) and the CUDA kernels (cuda/kernels/fused_attention.hpp),
// which the CUDA tests compare; on the GPU, bf16 with heads of 32, 64 or 128 runs on tensor
// cores instead (kernels/flash_attention.hpp, P and dS rounded to bf16 between products). The
// host tests compare the layer with the reference, a double-precision loop and finite
// differences (tests/unit/attention_test.cpp). The head width E is at most
// kernels::fused_attention_max_head (128).
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tpx/kernels/attention_terms.hpp"
#include "tpx/kernels/fused_attention.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/nn/attention.hpp"
#include "tpx/nn/rows.hpp"
#include "tpx/ops/permute.hpp"

namespace tpx::nn {

namespace detail {

// t itself if its dims are already in the order Order (a type_list of unsplit dims), else a
// copy in that order.
template <class Order, AnyTensor Tn>
decltype(auto) in_order(const Tn& t) {
  if constexpr (std::is_same_v<unsplit_dims_t<Tn>, Order>) {
    return t;
  } else {
    return [&]<class... O>(type_list<O...>) { return permute<O...>(t); }(Order{});
  }
}

// The layout the fused kernels read: the batch dims in q's order, then the sequence dim, then E.
template <class Qt, class Kt>
struct fused_layout {
  using dims = attention_dims<Qt, Kt>;
  using batch = remove_all_t<unsplit_dims_t<Qt>,
                             type_list<typename dims::query_sequence, typename dims::head>>;
  using query_order =
      concat_t<batch, type_list<typename dims::query_sequence, typename dims::head>>;
  using key_order = concat_t<batch, type_list<typename dims::key_sequence, typename dims::head>>;
};

template <class Qb, class Kb>
constexpr bool check_batch_splits() {
  using q_batch =
      typename leading_dims<typename Qb::dims, std::make_index_sequence<Qb::order - 2>>::type;
  using k_batch =
      typename leading_dims<typename Kb::dims, std::make_index_sequence<Kb::order - 2>>::type;
  if constexpr (!std::is_same_v<q_batch, k_batch>)
    compile_error<"tpx: fused_causal_attention: the batch dims of q " + Qb::notation + " and k " +
                  Kb::notation + " must be split over the same mesh axes">{};
  return true;
}

// sequences (the local batch rows), T and E of the operands in fused layout, checked.
struct fused_geometry {
  std::int64_t sequences;
  std::int64_t t_len;
  int e;
  float scale;
};

template <class Qb, class Kb, class Vb>
fused_geometry fused_geometry_of(const Qb& q, const Kb& k, const Vb& v) {
  constexpr std::size_t n = Qb::order;
  const auto where = [&] {
    return "tpx: fused_causal_attention of q " + std::string(Qb::notation.c_str()) + ", k " +
           std::string(Kb::notation.c_str()) + " (rank " +
           std::to_string(q.context().world_rank()) + "): ";
  };
  for (std::size_t d = 0; d < n; ++d)
    if (q.global_extent(d) != k.global_extent(d) || k.global_extent(d) != v.global_extent(d))
      throw std::invalid_argument(
          where() + "dim " + std::to_string(d) + " of the batch-first layout has extents " +
          std::to_string(q.global_extent(d)) + ", " + std::to_string(k.global_extent(d)) + " and " +
          std::to_string(v.global_extent(d)) + " in q, k and v; self-attention needs them equal");
  const std::int64_t e = q.global_extent(n - 1);
  if (e > kernels::fused_attention_max_head)
    throw std::invalid_argument(where() + "head width E = " + std::to_string(e) +
                                " is more than the fused kernels' " +
                                std::to_string(kernels::fused_attention_max_head) +
                                "; use causal_attention_forward (nn/attention.hpp)");
  const std::int64_t t = q.global_extent(n - 2);
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 2 < n; ++d) rows *= q.local_extent(d);
  return {rows, t, static_cast<int>(e), e > 0 ? 1.0f / std::sqrt(static_cast<float>(e)) : 1.0f};
}

}  // namespace detail

template <class Ot, class Lt>
struct fused_attention_output {
  Ot out;  // [batch..., T, E]
  Lt lse;  // [batch..., T], fp32: log of each query row's softmax denominator
};

template <AnyTensor Qt, AnyTensor Kt, AnyTensor Vt>
auto fused_causal_attention_forward(const Qt& q, const Kt& k, const Vt& v) {
  static_assert(detail::check_attention_operands<Qt, Kt, Vt>());
  using layout = detail::fused_layout<Qt, Kt>;
  const auto& qb = detail::in_order<typename layout::query_order>(q);
  const auto& kb = detail::in_order<typename layout::key_order>(k);
  const auto& vb = detail::in_order<typename layout::key_order>(v);
  using Qb = std::remove_cvref_t<decltype(qb)>;
  static_assert(detail::check_batch_splits<Qb, std::remove_cvref_t<decltype(kb)>>());
  const detail::fused_geometry g = detail::fused_geometry_of(qb, kb, vb);
  const rank_context& ctx = q.context();
  Qb out(ctx, qb.shape(), for_overwrite);
  auto lse = make_per_row<per_row_t<Qb>>(out);
  Qb::space::fused_attention_forward(ctx, g.sequences, g.t_len, g.e, g.scale, qb.data(), kb.data(),
                                     vb.data(), out.data(), lse.data());
  return fused_attention_output<Qb, decltype(lse)>{std::move(out), std::move(lse)};
}

// dq [batch..., T, E], dk and dv [batch..., S, E] from the forward's out and lse and dout (laid
// out as out).
template <AnyTensor Qt, AnyTensor Kt, AnyTensor Vt, AnyTensor Ot, AnyTensor Lt>
auto fused_causal_attention_backward(const Qt& q, const Kt& k, const Vt& v, const Ot& out,
                                     const Lt& lse, const Ot& dout) {
  static_assert(detail::check_attention_operands<Qt, Kt, Vt>());
  using layout = detail::fused_layout<Qt, Kt>;
  const auto& qb = detail::in_order<typename layout::query_order>(q);
  const auto& kb = detail::in_order<typename layout::key_order>(k);
  const auto& vb = detail::in_order<typename layout::key_order>(v);
  using Qb = std::remove_cvref_t<decltype(qb)>;
  using Kb = std::remove_cvref_t<decltype(kb)>;
  static_assert(std::is_same_v<Ot, Qb> && std::is_same_v<Lt, per_row_t<Qb>>,
                "tpx: fused_causal_attention_backward: out, lse and dout must be the forward's");
  const detail::fused_geometry g = detail::fused_geometry_of(qb, kb, vb);
  const rank_context& ctx = q.context();
  using T = typename Qb::value_type;
  using Space = typename Qb::space;
  auto delta = make_per_row<per_row_t<Qb>>(out);  // dout . out per query row
  Space::template reduce_rows<kernels::sum_reducer<float>>(
      ctx, g.sequences * g.t_len, g.e, kernels::product_term<T>{out.data(), dout.data(), g.e},
      delta.data());
  Qb dq(ctx, qb.shape(), for_overwrite);
  Kb dk(ctx, kb.shape(), for_overwrite);
  Kb dv(ctx, kb.shape(), for_overwrite);
  Space::fused_attention_backward(ctx, g.sequences, g.t_len, g.e, g.scale, qb.data(), kb.data(),
                                  vb.data(), dout.data(), lse.data(), delta.data(), dq.data(),
                                  dk.data(), dv.data());
  return attention_gradients<Qb, Kb, Kb>{std::move(dq), std::move(dk), std::move(dv)};
}

}  // namespace tpx::nn

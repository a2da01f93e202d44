// Fused causal attention: nn/attention.hpp's layer without the [T, S] probabilities, computed
// tile by tile with an online softmax and recomputed in the backward pass (FlashAttention), so
// its memory is O(T) per head where the reference's is O(T^2).
//
//   // q[B_X, T, H_Y, E], k and v [B_X, S, H_Y, E]
//   auto fwd = tpx::nn::fused_causal_attention_forward(q, k, v);
//   // fwd.out: [B_X, T, H_Y, E], like q; fwd.lse: [B_X, T, H_Y], the log of each row's softmax sum
//   auto g = tpx::nn::fused_causal_attention_backward(q, k, v, fwd.out, fwd.lse, dout);
//   // g.dq like q, g.dk and g.dv like k
//
// Operands and their sharding are the reference's (nn/attention.hpp): dims found by name, batch
// dims (heads, batch) split alike on q, k and v so that nothing is communicated, S and E whole, and
// T whole too (the reference also takes a block of queries, context parallelism; these kernels do
// not yet: a split T is a compile error saying so). The kernels read the operands where they lie,
// as FlashAttention reads strided inputs: q in its own order [lead..., T, inner..., E], any batch
// dims before T and after it (the projections' [B, T, H, E] has H between T and E), and results
// come in that order too: out and dq like q, lse like q without E, dk and dv like k. So attention
// between projections copies nothing (the reference's einsums put batch dims first). k or v in
// another order than q's is first copied into it (ops/permute.hpp).
// The math (kernels/fused_attention.hpp) is one definition for the host loops
// (tensor/host_fused_attention.hpp) and the CUDA kernels (cuda/kernels/fused_attention.hpp),
// which the CUDA tests compare; on the GPU, bf16 with heads of 32, 64 or 128 runs on tensor
// cores instead (kernels/flash_attention.hpp, P and dS rounded to bf16 between products). The
// host tests compare the layer with the reference, a double-precision loop and finite
// differences (tests/unit/attention_test.cpp). The head width E is at most
// kernels::fused_attention_max_head (128).
#pragma once

#include <algorithm>
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
// copy in that order (which keeps each dim's split).
template <class Order, AnyTensor Tn>
decltype(auto) in_order(const Tn& t) {
  if constexpr (std::is_same_v<unsplit_dims_t<Tn>, Order>) {
    return t;
  } else {
    return [&]<class... O>(type_list<O...>) { return permute<O...>(t); }(Order{});
  }
}

// The layout the fused kernels read: q's own order [lead..., T, inner..., E], and k and v in
// the same order with S in T's place. query_position is where T (and S) stands (0 for operands
// check_attention_operands rejects, so that only its error is reported).
template <class Qt, class Kt>
struct fused_layout {
  using dims = attention_dims<Qt, Kt>;
  using query_order = unsplit_dims_t<Qt>;
  static constexpr std::size_t query_position =
      static_cast<std::size_t>(std::max(index_of_v<typename dims::query_sequence, query_order>, 0));
  using key_order =
      replace_dim_t<query_order, typename dims::query_sequence, typename dims::key_sequence>;
};

// Tn's dims as they are split, without the sequence dim at Position: its batch dims and E.
template <class Tn, std::size_t Position>
using batch_dims_t =
    remove_all_t<typename Tn::dims, type_list<type_at_t<Position, typename Tn::dims>>>;

// The fused kernels take whole sequences of queries: no block of them (context parallelism).
template <class Qt, class Kt>
constexpr bool check_whole_queries() {
  check_whole_dim<Qt, typename attention_dims<Qt, Kt>::query_sequence, "fused_causal_attention",
                  "query sequence",
                  "; the fused kernels need every query of a sequence on its rank (a block of "
                  "queries, context parallelism, takes causal_attention_forward)">();
  return true;
}

template <class Qb, class Kb, std::size_t Position>
constexpr bool check_batch_splits() {
  if constexpr (!std::is_same_v<batch_dims_t<Qb, Position>, batch_dims_t<Kb, Position>>)
    compile_error<"tpx: fused_causal_attention: the batch dims of q " + Qb::notation + " and k " +
                  Kb::notation + " must be split over the same mesh axes">{};
  return true;
}

// sequences (the local (batch, head) pairs), the kernels' layout of their rows, E and the
// scale, of operands in fused layout, checked.
struct fused_geometry {
  std::int64_t sequences;
  kernels::attention_layout layout;
  int e;
  float scale;
};

template <std::size_t Position, class Qb, class Kb, class Vb>
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
          where() + "dim " + std::to_string(d) + " of q's order has extents " +
          std::to_string(q.global_extent(d)) + ", " + std::to_string(k.global_extent(d)) + " and " +
          std::to_string(v.global_extent(d)) + " in q, k and v; self-attention needs them equal");
  const std::int64_t e = q.global_extent(n - 1);
  if (e > kernels::fused_attention_max_head)
    throw std::invalid_argument(where() + "head width E = " + std::to_string(e) +
                                " is more than the fused kernels' " +
                                std::to_string(kernels::fused_attention_max_head) +
                                "; use causal_attention_forward (nn/attention.hpp)");
  const std::int64_t t = q.global_extent(Position);
  std::int64_t sequences = 1, heads = 1;  // heads: the sequences interleaved at each position
  for (std::size_t d = 0; d + 1 < n; ++d) {
    if (d != Position) sequences *= q.local_extent(d);
    if (d > Position) heads *= q.local_extent(d);
  }
  return {sequences,
          {t, heads},
          static_cast<int>(e),
          e > 0 ? 1.0f / std::sqrt(static_cast<float>(e)) : 1.0f};
}

}  // namespace detail

template <class Ot, class Lt>
struct fused_attention_output {
  Ot out;  // like q
  Lt lse;  // like q without E, fp32: log of each query row's softmax denominator
};

template <AnyTensor Qt, AnyTensor Kt, AnyTensor Vt>
auto fused_causal_attention_forward(const Qt& q, const Kt& k, const Vt& v) {
  static_assert(detail::check_attention_operands<Qt, Kt, Vt>() &&
                detail::check_whole_queries<Qt, Kt>());
  using layout = detail::fused_layout<Qt, Kt>;
  constexpr std::size_t position = layout::query_position;
  const auto& kb = detail::in_order<typename layout::key_order>(k);
  const auto& vb = detail::in_order<typename layout::key_order>(v);
  static_assert(detail::check_batch_splits<Qt, std::remove_cvref_t<decltype(kb)>, position>());
  const detail::fused_geometry g = detail::fused_geometry_of<position>(q, kb, vb);
  const rank_context& ctx = q.context();
  Qt out(ctx, q.shape(), for_overwrite);
  auto lse = make_per_row<per_row_t<Qt>>(out);
  Qt::space::fused_attention_forward(ctx, g.sequences, g.layout, g.e, g.scale, q.data(), kb.data(),
                                     vb.data(), out.data(), lse.data());
  return fused_attention_output<Qt, decltype(lse)>{std::move(out), std::move(lse)};
}

// dq like q, dk and dv like k (in q's order) from the forward's out and lse and dout (laid out
// as out).
template <AnyTensor Qt, AnyTensor Kt, AnyTensor Vt, AnyTensor Ot, AnyTensor Lt>
auto fused_causal_attention_backward(const Qt& q, const Kt& k, const Vt& v, const Ot& out,
                                     const Lt& lse, const Ot& dout) {
  static_assert(detail::check_attention_operands<Qt, Kt, Vt>() &&
                detail::check_whole_queries<Qt, Kt>());
  using layout = detail::fused_layout<Qt, Kt>;
  constexpr std::size_t position = layout::query_position;
  const auto& kb = detail::in_order<typename layout::key_order>(k);
  const auto& vb = detail::in_order<typename layout::key_order>(v);
  using Kb = std::remove_cvref_t<decltype(kb)>;
  static_assert(std::is_same_v<Ot, Qt> && std::is_same_v<Lt, per_row_t<Qt>>,
                "tpx: fused_causal_attention_backward: out, lse and dout must be the forward's");
  const detail::fused_geometry g = detail::fused_geometry_of<position>(q, kb, vb);
  const rank_context& ctx = q.context();
  using T = typename Qt::value_type;
  using Space = typename Qt::space;
  auto delta = make_per_row<per_row_t<Qt>>(out);  // dout . out per query row
  Space::template reduce_rows<kernels::sum_reducer<float>>(
      ctx, local_rows(out), g.e, kernels::product_term<T>{out.data(), dout.data(), g.e},
      delta.data());
  Qt dq(ctx, q.shape(), for_overwrite);
  Kb dk(ctx, kb.shape(), for_overwrite);
  Kb dv(ctx, kb.shape(), for_overwrite);
  Space::fused_attention_backward(ctx, g.sequences, g.layout, g.e, g.scale, q.data(), kb.data(),
                                  vb.data(), dout.data(), lse.data(), delta.data(), dq.data(),
                                  dk.data(), dv.data());
  return attention_gradients<Qt, Kb, Kb>{std::move(dq), std::move(dk), std::move(dv)};
}

}  // namespace tpx::nn

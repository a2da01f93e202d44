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
// dims (heads, batch) split alike on q, k and v so that nothing is communicated, S and E whole. T
// may be split, as context parallelism splits it: a rank then holds a block of each sequence's
// queries and attends from them to every key, its query at position t0 + i seeing keys s <= t0 + i
// (the kernels skip the keys after the block's last query, so with contiguous blocks the last does
// the most work, unless the sequence is in the load-balanced order:
// `fused_causal_attention_forward<load_balanced<C>>(q, k, v)`, nn/sequence_order.hpp). dk and dv
// then come out as partial sums over T's axes, [..., S, ..., E]{U_C}, each rank's queries' share,
// which the reduce-scatter adjoint to k's and v's all-gather completes (as the reference's einsums
// say). On the GPU a block of queries runs on the tensor-core kernels too (bf16, heads of 32, 64
// or 128). The kernels read the operands where they lie, as
// FlashAttention reads strided inputs: q in its own order [lead..., T, inner..., E], any batch dims
// before T and after it (the projections' [B, T, H, E] has H between T and E), and results come in
// that order too: out and dq like q, lse like q without E, dk and dv like k. So attention between
// projections copies nothing (the reference's einsums put batch dims first). k or v in another
// order than q's is first copied into it (ops/permute.hpp).
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
#include "tpx/kernels/elementwise.hpp"
#include "tpx/kernels/fused_attention.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/nn/attention.hpp"
#include "tpx/nn/rows.hpp"
#include "tpx/nn/sequence_order.hpp"
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
// the same order with S in T's place and without grouped-query attention's group dim (Group, the
// last of q's lead and inner dims, void without). query_position is where T stands in q (0 for
// operands check_attention_operands rejects, so that only its error is reported), key_position
// where S stands in k; group_position is where Group stands in q (past its end without one).
template <class Qt, class Kt, class Group = void>
struct fused_layout {
  using dims = attention_dims<Qt, Kt, Group>;
  using query_order = unsplit_dims_t<Qt>;
  static constexpr std::size_t query_position =
      static_cast<std::size_t>(std::max(index_of_v<typename dims::query_sequence, query_order>, 0));
  static constexpr std::size_t group_position =
      dims::grouped ? static_cast<std::size_t>(std::max(index_of_v<Group, query_order>, 0))
                    : Qt::order;
  using key_order = replace_dim_t<remove_all_t<query_order, type_list<Group>>,
                                  typename dims::query_sequence, typename dims::key_sequence>;
  // Where S stands in key_order: T's place, one less behind a group dim before it.
  static constexpr std::size_t key_position =
      query_position - (group_position < query_position ? 1 : 0);
};

// Tn's dim at Position as it is split; void past Tn's last dim (where a layout without a group dim
// puts it).
template <class Tn, std::size_t Position, bool = (Position < Tn::order)>
struct dim_at {
  using type = void;
};
template <class Tn, std::size_t Position>
struct dim_at<Tn, Position, true> {
  using type = type_at_t<Position, typename Tn::dims>;
};
template <class Tn, std::size_t Position>
using dim_at_t = typename dim_at<Tn, Position>::type;

// The mesh axes of a split dim, none for void.
template <class D>
struct axes_of {
  using type = typename D::axes;
};
template <>
struct axes_of<void> {
  using type = type_list<>;
};

template <class Layout, class Qb, class Kb>
constexpr bool check_batch_splits() {
  // q's and k's dims as they are split, without the sequence dims and the group dim: the batch
  // dims and E.
  using query_batch =
      remove_all_t<typename Qb::dims, type_list<dim_at_t<Qb, Layout::query_position>,
                                                dim_at_t<Qb, Layout::group_position>>>;
  using key_batch = remove_all_t<typename Kb::dims, type_list<dim_at_t<Kb, Layout::key_position>>>;
  if constexpr (!std::is_same_v<query_batch, key_batch>)
    compile_error<"tpx: fused_causal_attention: the batch dims of q " + Qb::notation + " and k " +
                  Kb::notation + " must be split over the same mesh axes">{};
  return true;
}

// The gradient of k or v in fused layout (Kb): a partial sum over the axes that split q's T at
// Position and its group dim at GroupPosition, each rank's queries' share (Kb itself when both
// are whole).
template <class Qt, class Kb, std::size_t Position, std::size_t GroupPosition>
using key_gradient_t = tensor_with_t<
    Kb, typename Kb::dims,
    as_unreduced_t<unique_t<concat_t<typename axes_of<dim_at_t<Qt, Position>>::type,
                                     typename axes_of<dim_at_t<Qt, GroupPosition>>::type>>>>;

// sequences (the local (batch, head) pairs), the kernels' layouts of their query and key rows
// and the block of queries, E and the scale, of operands in fused layout, checked. A block in the
// load-balanced order is two runs of positions, the kernels called once for each (run_shape).
struct fused_geometry {
  std::int64_t sequences;
  kernels::attention_shape shape;
  int e;
  float scale;

  // The kernels' shape for one run of the block's queries: its rows within the block's (the run
  // starts at the query arrays' pointers offset by query_offset rows) from its first position.
  kernels::attention_shape run_shape(const position_run& run) const {
    return {{run.length, shape.queries.heads, shape.queries.t_len},
            shape.keys,
            run.position,
            shape.group};
  }
  std::int64_t query_offset(const position_run& run) const {
    return run.index * shape.queries.heads;
  }
};

template <class Layout, class Qb, class Kb, class Vb>
fused_geometry fused_geometry_of(const Qb& q, const Kb& k, const Vb& v) {
  constexpr std::size_t n = Qb::order, position = Layout::query_position;
  constexpr std::size_t group = Layout::group_position;  // n without one
  const auto where = [&] {
    return "tpx: fused_causal_attention of q " + std::string(Qb::notation.c_str()) + ", k " +
           std::string(Kb::notation.c_str()) + " (rank " +
           std::to_string(q.context().world_rank()) + "): ";
  };
  for (std::size_t d = 0; d < n; ++d) {  // the sequence too: T's extent is S's
    if (d == group) continue;
    const std::size_t dk = d < group ? d : d - 1;
    if (q.global_extent(d) != k.global_extent(dk) || k.global_extent(dk) != v.global_extent(dk))
      throw std::invalid_argument(
          where() + "dim " + std::to_string(d) + " of q's order has extents " +
          std::to_string(q.global_extent(d)) + ", " + std::to_string(k.global_extent(dk)) +
          " and " + std::to_string(v.global_extent(dk)) +
          " in q, k and v; self-attention needs them equal");
  }
  const std::int64_t e = q.global_extent(n - 1);
  if (e > kernels::fused_attention_max_head)
    throw std::invalid_argument(where() + "head width E = " + std::to_string(e) +
                                " is more than the fused kernels' " +
                                std::to_string(kernels::fused_attention_max_head) +
                                "; use causal_attention_forward (nn/attention.hpp)");
  // heads: the sequences interleaved at each position, on each side
  std::int64_t sequences = 1, query_heads = 1, key_heads = 1;
  for (std::size_t d = 0; d + 1 < n; ++d) {
    if (d != position) sequences *= q.local_extent(d);
    if (d > position) query_heads *= q.local_extent(d);
    if (d > position && d != group) key_heads *= q.local_extent(d);
  }
  // The rank's block of queries, from position first, against every key (k and v are whole),
  // the group's query sequences reading one key sequence.
  const kernels::attention_shape shape{{q.local_extent(position), query_heads},
                                       {k.local_extent(Layout::key_position), key_heads},
                                       q.local_offset(position),
                                       group < n ? q.local_extent(group) : 1};
  return {sequences, shape, static_cast<int>(e),
          e > 0 ? 1.0f / std::sqrt(static_cast<float>(e)) : 1.0f};
}

// The options of the fused layer: a sequence order (nn/sequence_order.hpp; contiguous_positions
// when none) and query_groups<G> (nn/attention.hpp), at most one of each.
template <class... Options>
using order_option_t = type_at_t<
    0, concat_t<std::conditional_t<is_query_groups_v<Options>, type_list<>, type_list<Options>>...,
                type_list<contiguous_positions>>>;

template <class... Options>
constexpr bool check_fused_options() {
  static_assert(sizeof...(Options) - group_options_v<Options...> <= 1,
                "tpx: fused_causal_attention: one sequence order at most");
  static_assert(group_options_v<Options...> <= 1,
                "tpx: fused_causal_attention: one query_groups<G> at most");
  return check_order<order_option_t<Options...>>();
}

}  // namespace detail

template <class Ot, class Lt>
struct fused_attention_output {
  Ot out;  // like q
  Lt lse;  // like q without E, fp32: log of each query row's softmax denominator
};

// Options: Order (nn/sequence_order.hpp) says where q's T and k's S hold which positions:
// contiguous_positions by default; with load_balanced<C...> q's T is split over C in the
// balanced order and k's and v's S hold the whole sequence in that order (all-gathered over C),
// and the layer moves the keys into the order of positions, calls the kernels once for each of
// the rank's two chunks of queries, and gives dk and dv back in k's order. query_groups<G> names
// grouped-query attention's group dim (nn/attention.hpp): each key head serves the G query
// heads of q's dim G, the last of q's dims besides T and E.
template <class... Options, AnyTensor Qt, AnyTensor Kt, AnyTensor Vt>
auto fused_causal_attention_forward(const Qt& q, const Kt& k, const Vt& v) {
  static_assert(detail::check_fused_options<Options...>());
  using Order = detail::order_option_t<Options...>;
  using Group = detail::group_dim_t<Options...>;
  static_assert(detail::check_attention_operands<Qt, Kt, Vt, Group>());
  using layout = detail::fused_layout<Qt, Kt, Group>;
  constexpr std::size_t position = layout::query_position;
  static_assert(detail::check_order_split<Order, position, Qt, "fused_causal_attention">());
  const auto& kb = detail::in_order<typename layout::key_order>(k);
  const auto& vb = detail::in_order<typename layout::key_order>(v);
  static_assert(detail::check_batch_splits<layout, Qt, std::remove_cvref_t<decltype(kb)>>());
  const detail::fused_geometry g = detail::fused_geometry_of<layout>(q, kb, vb);
  const rank_context& ctx = q.context();
  const char* const who = "fused_causal_attention_forward";
  const local_positions runs = positions_of<Order, position>(q, who);
  const auto& kp = copy_in_position_order<Order, layout::key_position>(kb, who);
  const auto& vp = copy_in_position_order<Order, layout::key_position>(vb, who);
  Qt out(ctx, q.shape(), for_overwrite);
  auto lse = make_per_row<per_row_t<Qt>>(out);
  for (int r = 0; r < runs.count; ++r) {
    const std::int64_t rows = g.query_offset(runs.runs[r]);
    Qt::space::fused_attention_forward(ctx, g.sequences, g.run_shape(runs.runs[r]), g.e, g.scale,
                                       q.data() + rows * g.e, kp.data(), vp.data(),
                                       out.data() + rows * g.e, lse.data() + rows);
  }
  return fused_attention_output<Qt, decltype(lse)>{std::move(out), std::move(lse)};
}

// dq like q, dk and dv like k (in q's order without a group dim; partial sums over T's axes, and
// the group dim's, when they are split) from the forward's out and lse and dout (laid out as
// out), Options as for the forward.
template <class... Options, AnyTensor Qt, AnyTensor Kt, AnyTensor Vt, AnyTensor Ot, AnyTensor Lt>
auto fused_causal_attention_backward(const Qt& q, const Kt& k, const Vt& v, const Ot& out,
                                     const Lt& lse, const Ot& dout) {
  static_assert(detail::check_fused_options<Options...>());
  using Order = detail::order_option_t<Options...>;
  using Group = detail::group_dim_t<Options...>;
  static_assert(detail::check_attention_operands<Qt, Kt, Vt, Group>());
  using layout = detail::fused_layout<Qt, Kt, Group>;
  constexpr std::size_t position = layout::query_position;
  static_assert(detail::check_order_split<Order, position, Qt, "fused_causal_attention">());
  const auto& kb = detail::in_order<typename layout::key_order>(k);
  const auto& vb = detail::in_order<typename layout::key_order>(v);
  using Kg = detail::key_gradient_t<Qt, std::remove_cvref_t<decltype(kb)>, position,
                                    layout::group_position>;
  static_assert(std::is_same_v<Ot, Qt> && std::is_same_v<Lt, per_row_t<Qt>>,
                "tpx: fused_causal_attention_backward: out, lse and dout must be the forward's");
  const detail::fused_geometry g = detail::fused_geometry_of<layout>(q, kb, vb);
  const rank_context& ctx = q.context();
  using T = typename Qt::value_type;
  using Space = typename Qt::space;
  const char* const who = "fused_causal_attention_backward";
  constexpr bool balanced = !std::is_same_v<Order, contiguous_positions>;  // two runs
  const local_positions runs = positions_of<Order, position>(q, who);
  auto delta = make_per_row<per_row_t<Qt>>(out);  // dout . out per query row
  Space::template reduce_rows<kernels::sum_reducer<float>>(
      ctx, local_rows(out), g.e, kernels::product_term<T>{out.data(), dout.data(), g.e},
      delta.data());
  Qt dq(ctx, q.shape(), for_overwrite);
  // A rank with an empty block of the group dim (more ranks than query heads per key head)
  // computes nothing, and its share of dk and dv is 0.
  const auto key_gradient = [&] {
    return g.shape.group == 0 ? Kg(ctx, kb.shape()) : Kg(ctx, kb.shape(), for_overwrite);
  };
  Kg dk = key_gradient();
  Kg dv = key_gradient();
  {  // the keys in the order of positions, and a second run's share of dk and dv, held here only
    const auto& kp = copy_in_position_order<Order, layout::key_position>(kb, who);
    const auto& vp = copy_in_position_order<Order, layout::key_position>(vb, who);
    const auto run_gradients = [&](const position_run& run, Kg& dk_run, Kg& dv_run) {
      const std::int64_t rows = g.query_offset(run);
      Space::fused_attention_backward(ctx, g.sequences, g.run_shape(run), g.e, g.scale,
                                      q.data() + rows * g.e, kp.data(), vp.data(),
                                      dout.data() + rows * g.e, lse.data() + rows,
                                      delta.data() + rows, dq.data() + rows * g.e, dk_run.data(),
                                      dv_run.data());
    };
    run_gradients(runs.runs[0], dk, dv);
    if constexpr (balanced) {  // the two runs' shares, added in place
      Kg dk_second = key_gradient();
      Kg dv_second = key_gradient();
      run_gradients(runs.runs[1], dk_second, dv_second);
      Space::transform(ctx, dk.size(), kernels::add{}, dk.data(), std::as_const(dk).data(),
                       std::as_const(dk_second).data());
      Space::transform(ctx, dv.size(), kernels::add{}, dv.data(), std::as_const(dv).data(),
                       std::as_const(dv_second).data());
    }
  }
  if constexpr (!balanced) {
    return attention_gradients<Qt, Kg, Kg>{std::move(dq), std::move(dk), std::move(dv)};
  } else {  // back in k's order, each share freed as soon as it is copied
    const auto in_keys_order = [&](Kg share) {
      return copy_in_order<Order, layout::key_position>(share, who);
    };
    Kg dk_ordered = in_keys_order(std::move(dk));
    Kg dv_ordered = in_keys_order(std::move(dv));
    return attention_gradients<Qt, Kg, Kg>{std::move(dq), std::move(dk_ordered),
                                           std::move(dv_ordered)};
  }
}

}  // namespace tpx::nn

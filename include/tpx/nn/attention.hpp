// Causal softmax attention over named dims, forward and backward, with heads (and batch) split
// over mesh axes and no communication: the attention of a Megatron tensor-parallel block, where
// heads are split over the tensor-parallel axis and every rank attends with its own heads.
//
//   // q[B_X, T, H_Y, E], k and v [B_X, S, H_Y, E]
//   auto fwd = tpx::nn::causal_attention_forward(q, k, v);
//   // fwd.out: [B_X, H_Y, T, E], fwd.probs: [B_X, H_Y, T, S], kept for the backward
//   auto g = tpx::nn::causal_attention_backward(q, k, v, fwd.probs, dout);  // g.dq, g.dk, g.dv
//
//   scores = einsum<E>(q, k)                       [batch..., T, S]
//   probs  = causal softmax of scores / sqrt(E)    (kernels/attention_terms.hpp)
//   out    = einsum<S>(probs, v)                   [batch..., T, E]
// and the backward, with ds = dL/dscores:
//   dv = einsum<T>(probs, dout),  dprobs = einsum<E>(dout, v),
//   ds = probs (dprobs - rowsum(probs dprobs)) / sqrt(E),
//   dq = einsum<S>(ds, k),  dk = einsum<T>(ds, q).
// The dims are found by name: E is q's last dim, T the one dim of q that k lacks, S the one dim
// of k that q lacks (a projection's [B, T, H, E] gives k after tpx::rename<T, S>); every other
// dim (B and H above, any number of them, anywhere) is a batch dim. Split over the same axes on
// q, k and v, batch dims stay split through every product (einsum's batch rule), so neither
// direction communicates. S and E must be whole on every rank (sequence parallelism all-gathers
// the sequence before attention): a split is a compile error naming the dim and the axis.
// Results come in einsum's layout, batch dims first: [batch..., T, E] whatever q's layout (einsum
// transposes an operand whose batch dims do not lead, once, locally). Self-attention: T and S
// have the same extent, query t sees keys s <= t.
//
// Context parallelism: T may be split. A rank then holds a block of queries [t0, t0 + Tq) of each
// sequence against all of its keys, and its query at t0 + i sees keys s <= t0 + i, t0 being the
// block's offset along T. Keys and values are all-gathered over T's axes first (Llama 3's
// context parallelism, all-gather based), and the types carry the rest:
//
//   // q[B, T_C, H_Y, E], k and v [B, S_C, H_Y, E]: the sequence split over C, heads over Y
//   auto kf = tpx::all_gather<C>(k), vf = tpx::all_gather<C>(v);   // [B, S, H_Y, E]
//   auto fwd = tpx::nn::causal_attention_forward(q, kf, vf);  // out [B, H_Y, T_C, E]
//   auto g = tpx::nn::causal_attention_backward(q, kf, vf, fwd.probs, dout);
//   // g.dq [B, H_Y, T_C, E]; g.dk and g.dv [B, H_Y, S, E]{U_C}: contracting T, split over C on
//   // both sides, leaves each rank its queries' share, so the all-gather's adjoint, a
//   // reduce-scatter over C, completes them onto k's and v's blocks.
//
// This layer computes every score of a block's [Tq, S] rows, masked or not, so contiguous blocks
// cost every rank the same. The fused layer (nn/fused_attention.hpp) takes blocks of queries too
// and skips the keys after a block's last query, which leaves the last block the most work (its
// queries see every key) and the first the least; balancing would need T permuted before the
// split (Megatron's two chunks per rank).
//
// This is the reference formulation: it materialises the [T, S] probabilities of each head and
// keeps them for the backward, on the host and the GPU alike (einsum's batched GEMMs, and the
// softmax in grid passes of shared functors, or a row at a time where the space has a row kernel,
// as the host does: the same bits, tensor/host_causal_softmax.hpp). nn/fused_attention.hpp computes
// the same layer tile by tile without storing them (O(T) memory instead of O(T^2)); on the host the
// reference is the faster of the two, since its products are BLAS GEMMs.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tpx/core/compile_error.hpp"
#include "tpx/kernels/attention_terms.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/nn/rows.hpp"
#include "tpx/ops/einsum.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::nn {

namespace detail {

template <class Tn>
using unsplit_dims_t = typename remove_all_axes<typename Tn::dims>::type;

// The dims of attention's operands, found from their names: E, the head dim, is q's last; T is
// the one dim of q that k lacks, S the one dim of k that q lacks; the others are batch dims.
template <class Qt, class Kt>
struct attention_dims {
  using query_only = remove_all_t<unsplit_dims_t<Qt>, unsplit_dims_t<Kt>>;
  using key_only = remove_all_t<unsplit_dims_t<Kt>, unsplit_dims_t<Qt>>;
  static constexpr bool valid = query_only::size == 1 && key_only::size == 1;
  using head = unsplit_t<type_at_t<Qt::order - 1, typename Qt::dims>>;
  using query_sequence = type_at_t<0, concat_t<query_only, type_list<void>>>;
  using key_sequence = type_at_t<0, concat_t<key_only, type_list<void>>>;
};

// A dim attention needs whole on every rank; a split is named with its axes, then Remedy.
template <class Tn, class Name, fixed_string Layer, fixed_string Role, fixed_string Remedy>
constexpr void check_whole_dim() {
  constexpr int position = index_of_v<Name, unsplit_dims_t<Tn>>;
  if constexpr (position >= 0) {
    using D = type_at_t<position, typename Tn::dims>;
    if constexpr (D::axes::size != 0)
      compile_error<"tpx: " + Layer + ": " + Role + " dim " + D::name + " of " + Tn::notation +
                    " is split over mesh axes " + tpx::detail::axis_list<typename D::axes>() +
                    Remedy>{};
  }
}

template <class Qt, class Kt, class Vt>
constexpr bool check_attention_operands() {
  using dims = attention_dims<Qt, Kt>;
  if constexpr (!dims::valid || Kt::order != Qt::order ||
                !contains_v<typename dims::head, unsplit_dims_t<Kt>>) {
    compile_error<"tpx: causal_attention: q " + Qt::notation + " and k " + Kt::notation +
                  " must share every dim but one sequence dim each (T in q, S in k), the head "
                  "dim last in q">{};
  } else if constexpr (!std::is_same_v<typename Kt::dims, typename Vt::dims>) {
    compile_error<"tpx: causal_attention: k " + Kt::notation + " and v " + Vt::notation +
                  " must have the same dims, split alike">{};
  } else if constexpr (!std::is_same_v<typename Qt::unreduced, Unreduced<>> ||
                       !std::is_same_v<typename Kt::unreduced, Unreduced<>> ||
                       !std::is_same_v<typename Vt::unreduced, Unreduced<>>) {
    compile_error<"tpx: causal_attention: q " + Qt::notation + ", k " + Kt::notation + " and v " +
                  Vt::notation + " must be reduced (reshard a partial sum first)">{};
  } else {
    constexpr fixed_string whole = "; attention needs it whole on every rank (all-gather it first)";
    check_whole_dim<Kt, typename dims::key_sequence, "causal_attention", "key sequence",
                    "; attention needs every key on every rank (all-gather k and v over it first, "
                    "as context parallelism does)">();
    check_whole_dim<Qt, typename dims::head, "causal_attention", "head", whole>();
    check_whole_dim<Kt, typename dims::head, "causal_attention", "head", whole>();
  }
  return true;
}

struct attention_geometry {
  std::int64_t rows;           // local rows of the scores [batch..., T, S]: batch... x Tq
  std::int64_t keys;           // S (= T)
  kernels::query_block block;  // this rank's queries of each sequence: Tq from t0
  float scale;                 // 1 / sqrt(E)
};

// probs: the scores [batch..., T, S] (einsum's order: batch dims, then q's T, then k's S).
template <class Qt, class Kt, class Pt>
attention_geometry geometry_of(const Qt& q, const Pt& probs) {
  constexpr std::size_t n = Pt::order;
  const std::int64_t t = probs.global_extent(n - 2), s = probs.global_extent(n - 1);
  if (t != s)
    throw std::invalid_argument("tpx: causal_attention: q " + std::string(Qt::notation.c_str()) +
                                " has " + std::to_string(t) + " positions and k " +
                                std::string(Kt::notation.c_str()) + " has " + std::to_string(s) +
                                "; causal self-attention needs the same sequence on both");
  const std::int64_t e = q.global_extent(Qt::order - 1);
  return {local_rows(probs),
          s,
          {probs.local_extent(n - 2), probs.local_offset(n - 2)},
          e > 0 ? 1.0f / std::sqrt(static_cast<float>(e)) : 1.0f};
}

// A space with a row kernel for the causal softmax over scores of T (the host's).
template <class Space, class T>
concept row_causal_softmax_space = requires(const rank_context& ctx, std::int64_t n, T* x) {
  Space::causal_softmax_rows(ctx, n, n, kernels::query_block{n, 0}, 1.0f, x);
};

// The scores [batch..., T, S] overwritten by their causal softmax in three passes of the space's
// grid loops: the row maxima, the sums of exponentials, the probabilities.
template <AnyTensor Pt>
void causal_softmax_in_grid_passes(Pt& scores, const attention_geometry& g) {
  using T = typename Pt::value_type;
  using Space = typename Pt::space;
  const rank_context& ctx = scores.context();
  const std::int64_t cols = g.keys;
  auto row_max = make_per_row<per_row_t<Pt>>(scores);
  auto row_sum = make_per_row<per_row_t<Pt>>(scores);
  const kernels::causal_score<T> score{scores.data(), cols, g.block};
  const kernels::causal_shifted_exp<T> shifted{score, g.scale, row_max.data()};
  Space::template reduce_rows<kernels::max_reducer<float>>(ctx, g.rows, cols, score,
                                                           row_max.data());
  Space::template reduce_rows<kernels::sum_reducer<float>>(ctx, g.rows, cols, shifted,
                                                           row_sum.data());
  Space::for_each_element(ctx, g.rows, cols,
                          kernels::causal_softmax_write<T>{shifted, row_sum.data(), scores.data()});
}

}  // namespace detail

template <class Ot, class Pt>
struct attention_output {
  Ot out;    // [batch..., T, E]
  Pt probs;  // [batch..., T, S], for the backward
};

template <AnyTensor Qt, AnyTensor Kt, AnyTensor Vt>
auto causal_attention_forward(const Qt& q, const Kt& k, const Vt& v) {
  static_assert(detail::check_attention_operands<Qt, Kt, Vt>());
  using dims = detail::attention_dims<Qt, Kt>;
  using T = typename Qt::value_type;
  auto probs = einsum<typename dims::head>(q, k);  // the scores, overwritten by the probabilities
  using Pt = decltype(probs);
  const auto g = detail::geometry_of<Qt, Kt>(q, probs);
  using Space = typename Pt::space;
  if constexpr (detail::row_causal_softmax_space<Space, T>)
    Space::causal_softmax_rows(q.context(), g.rows, g.keys, g.block, g.scale, probs.data());
  else
    detail::causal_softmax_in_grid_passes(probs, g);
  auto out = einsum<typename dims::key_sequence>(probs, v);
  return attention_output<decltype(out), Pt>{std::move(out), std::move(probs)};
}

template <class Qt, class Kt, class Vt>
struct attention_gradients {
  Qt dq;
  Kt dk;
  Vt dv;
};

template <AnyTensor Qt, AnyTensor Kt, AnyTensor Vt, AnyTensor Pt, AnyTensor Ot>
auto causal_attention_backward(const Qt& q, const Kt& k, const Vt& v, const Pt& probs,
                               const Ot& dout) {
  static_assert(detail::check_attention_operands<Qt, Kt, Vt>());
  using dims = detail::attention_dims<Qt, Kt>;
  using E = typename dims::head;
  using S = typename dims::key_sequence;
  using Tdim = typename dims::query_sequence;
  using T = typename Qt::value_type;
  using Space = typename Pt::space;
  const auto g = detail::geometry_of<Qt, Kt>(q, probs);
  const rank_context& ctx = q.context();
  const std::int64_t cols = g.keys;
  auto dv = einsum<Tdim>(probs, dout);  // [batch..., S, E], {U_axes of T} when T is split
  auto ds = einsum<E>(dout, v);         // dL/dprobs, overwritten by dL/dscores
  static_assert(std::is_same_v<decltype(ds), Pt>,
                "tpx: causal_attention_backward: dout must have the batch dims of q, in q's order "
                "and split alike, and T split as q's");
  auto rowdot = make_per_row<per_row_t<Pt>>(probs);
  Space::template reduce_rows<kernels::sum_reducer<float>>(
      ctx, g.rows, cols, kernels::product_term<T>{probs.data(), ds.data(), cols}, rowdot.data());
  Space::for_each_element(
      ctx, g.rows, cols,
      kernels::softmax_backward_write<T>{probs.data(), rowdot.data(), cols, g.scale, ds.data()});
  auto dq = einsum<S>(ds, k);     // [batch..., T, E]
  auto dk = einsum<Tdim>(ds, q);  // [batch..., S, E], partial like dv
  return attention_gradients<decltype(dq), decltype(dk), decltype(dv)>{std::move(dq), std::move(dk),
                                                                       std::move(dv)};
}

}  // namespace tpx::nn

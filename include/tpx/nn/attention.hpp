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
// Grouped-query attention (GQA, Ainslie et al. 2023; Llama 2 70B, Llama 3): several query heads
// share each key and value head. q holds a key head's queries in a dim G that k and v lack, the
// last of q's dims besides T and E, and the layer is told its name:
//
//   // q[B_X, T, H_Y, G, E]: H key heads of G queries each; k and v [B_X, S, H_Y, E]
//   using groups = tpx::nn::query_groups<G>;
//   auto fwd = tpx::nn::causal_attention_forward<groups>(q, k, v);
//   auto g = tpx::nn::causal_attention_backward<groups>(q, k, v, fwd.probs, dout);
//   // fwd.out [B_X, H_Y, T, G, E]; g.dk and g.dv [B_X, H_Y, S, E], summed over G as over T
//
// The products are the same einsums with G a free dim of q: scores [batch..., T, G, S], and dk and
// dv contract G as well as T (einsum<T, G>). Split over a mesh axis (more tensor-parallel ranks
// than key heads: each key head whole on the ranks that split its queries), G leaves dk and dv
// partial sums over that axis, each rank its queries' share, which the types say
// ([B, H, S, E]{U_Y}) and the caller reduces. The name is an option, not a guess from the
// layout, because q [B, H, T, G, E] and q [B, H, G, T, E] (G query heads of every position, or
// positions of every query head) differ only in which of the two dims is the sequence.
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

// Grouped-query attention's option (see the top of this file): G, the dim of q that holds the
// query heads of each key head.
template <template <class...> class G>
struct query_groups {};

namespace detail {

template <class Tn>
using unsplit_dims_t = typename remove_all_axes<typename Tn::dims>::type;

// The dims of attention's operands, found from their names: E, the head dim, is q's last; T is
// the one dim of q that k lacks besides Group (grouped-query attention's, void without), S the
// one dim of k that q lacks; the others are batch dims.
template <class Qt, class Kt, class Group = void>
struct attention_dims {
  using query_and_group = remove_all_t<unsplit_dims_t<Qt>, unsplit_dims_t<Kt>>;
  using query_only = remove_all_t<query_and_group, type_list<Group>>;
  using key_only = remove_all_t<unsplit_dims_t<Kt>, unsplit_dims_t<Qt>>;
  using group = Group;
  static constexpr bool grouped = !std::is_void_v<Group>;
  static constexpr bool valid = query_only::size == 1 && key_only::size == 1 &&
                                (!grouped || contains_v<Group, query_and_group>);
  using head = unsplit_t<type_at_t<Qt::order - 1, typename Qt::dims>>;
  using query_sequence = type_at_t<0, concat_t<query_only, type_list<void>>>;
  using key_sequence = type_at_t<0, concat_t<key_only, type_list<void>>>;
  // q's dims besides T and E: its batch dims, then the group the last of them.
  using query_rest = remove_all_t<unsplit_dims_t<Qt>, type_list<query_sequence, head>>;
  static constexpr bool group_last = [] {
    if constexpr (!grouped)
      return true;
    else if constexpr (query_rest::size == 0)
      return false;
    else
      return std::is_same_v<type_at_t<query_rest::size - 1, query_rest>, Group>;
  }();
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

template <class Qt, class Kt, class Vt, class Group = void>
constexpr bool check_attention_operands() {
  using dims = attention_dims<Qt, Kt, Group>;
  if constexpr (dims::grouped && !contains_v<Group, typename dims::query_and_group>) {
    compile_error<"tpx: causal_attention: query_groups<" + Group::name + ">: " + Group::name +
                  " must be a dim of q " + Qt::notation + " that k " + Kt::notation +
                  " lacks (the query heads of each key head)">{};
  } else if constexpr (!dims::grouped && dims::query_and_group::size == 2 &&
                       dims::key_only::size == 1) {
    compile_error<"tpx: causal_attention: q " + Qt::notation + " has two dims that k " +
                  Kt::notation + " lacks, " + type_at_t<0, typename dims::query_and_group>::name +
                  " and " + type_at_t<1, typename dims::query_and_group>::name +
                  "; grouped-query attention names its group dim: "
                  "causal_attention_forward<tpx::nn::query_groups<G>>(q, k, v)">{};
  } else if constexpr (!dims::valid || Kt::order + (dims::grouped ? 1 : 0) != Qt::order ||
                       !contains_v<typename dims::head, unsplit_dims_t<Kt>>) {
    compile_error<"tpx: causal_attention: q " + Qt::notation + " and k " + Kt::notation +
                  " must share every dim but one sequence dim each (T in q, S in k), the head "
                  "dim last in q">{};
  } else if constexpr (!dims::group_last) {
    compile_error<"tpx: causal_attention: group dim " + Group::name + " of q " + Qt::notation +
                  " must come last among the dims of q besides " + dims::query_sequence::name +
                  " and " + dims::head::name +
                  " (q [..., T, ..., H, G, E] against k [..., S, ..., H, E]), so that the queries "
                  "of each key head lie together">{};
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

// An option's group dim, as a list: none for other options.
template <class Option>
struct group_of_option {
  using type = type_list<>;
};
template <template <class...> class G>
struct group_of_option<query_groups<G>> {
  using type = type_list<G<>>;
};

template <class Option>
inline constexpr bool is_query_groups_v = group_of_option<Option>::type::size == 1;

// The group dim Options name (void when none).
template <class... Options>
using group_dim_t =
    type_at_t<0, concat_t<typename group_of_option<Options>::type..., type_list<void>>>;

template <class... Options>
inline constexpr int group_options_v = (0 + ... + (is_query_groups_v<Options> ? 1 : 0));

// The reference layer's options: at most one query_groups.
template <class... Options>
constexpr bool check_reference_options() {
  static_assert(group_options_v<Options...> == sizeof...(Options),
                "tpx: causal_attention takes one option, tpx::nn::query_groups<G> (grouped-query "
                "attention's group dim)");
  static_assert(group_options_v<Options...> <= 1,
                "tpx: causal_attention: one query_groups<G> at most");
  return true;
}

// The contraction over the queries of dv and dk: over T, and G when grouped.
template <class Dims, AnyTensor A, AnyTensor B>
auto contract_queries(const A& a, const B& b) {
  if constexpr (Dims::grouped)
    return einsum<typename Dims::query_sequence, typename Dims::group>(a, b);
  else
    return einsum<typename Dims::query_sequence>(a, b);
}

struct attention_geometry {
  std::int64_t rows;           // local rows of the scores [batch..., T, S]: batch... x Tq
  std::int64_t keys;           // S (= T)
  kernels::query_block block;  // this rank's queries of each sequence: Tq from t0, G rows each
  float scale;                 // 1 / sqrt(E)
};

// probs: the scores [batch..., T, S] (einsum's order: batch dims, then q's T, then k's S), or
// grouped-query attention's [batch..., T, G, S] or [batch..., G, T, S] (q's free dims in q's
// order), whose rows at a position are the G after T.
template <class Dims, class Qt, class Kt, class Pt>
attention_geometry geometry_of(const Qt& q, const Pt& probs) {
  constexpr std::size_t n = Pt::order;
  constexpr std::size_t at =
      static_cast<std::size_t>(index_of_v<typename Dims::query_sequence, unsplit_dims_t<Pt>>);
  const std::int64_t t = probs.global_extent(at), s = probs.global_extent(n - 1);
  if (t != s)
    throw std::invalid_argument("tpx: causal_attention: q " + std::string(Qt::notation.c_str()) +
                                " has " + std::to_string(t) + " positions and k " +
                                std::string(Kt::notation.c_str()) + " has " + std::to_string(s) +
                                "; causal self-attention needs the same sequence on both");
  const std::int64_t e = q.global_extent(Qt::order - 1);
  const std::int64_t group = at + 2 < n ? probs.local_extent(n - 2) : 1;
  return {local_rows(probs),
          s,
          {probs.local_extent(at), probs.local_offset(at), group},
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

// Options: tpx::nn::query_groups<G> for grouped-query attention (the top of this file).
template <class... Options, AnyTensor Qt, AnyTensor Kt, AnyTensor Vt>
auto causal_attention_forward(const Qt& q, const Kt& k, const Vt& v) {
  static_assert(detail::check_reference_options<Options...>());
  using Group = detail::group_dim_t<Options...>;
  static_assert(detail::check_attention_operands<Qt, Kt, Vt, Group>());
  using dims = detail::attention_dims<Qt, Kt, Group>;
  using T = typename Qt::value_type;
  auto probs = einsum<typename dims::head>(q, k);  // the scores, overwritten by the probabilities
  using Pt = decltype(probs);
  const auto g = detail::geometry_of<dims, Qt, Kt>(q, probs);
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

template <class... Options, AnyTensor Qt, AnyTensor Kt, AnyTensor Vt, AnyTensor Pt, AnyTensor Ot>
auto causal_attention_backward(const Qt& q, const Kt& k, const Vt& v, const Pt& probs,
                               const Ot& dout) {
  static_assert(detail::check_reference_options<Options...>());
  using Group = detail::group_dim_t<Options...>;
  static_assert(detail::check_attention_operands<Qt, Kt, Vt, Group>());
  using dims = detail::attention_dims<Qt, Kt, Group>;
  using E = typename dims::head;
  using S = typename dims::key_sequence;
  using T = typename Qt::value_type;
  using Space = typename Pt::space;
  const auto g = detail::geometry_of<dims, Qt, Kt>(q, probs);
  const rank_context& ctx = q.context();
  const std::int64_t cols = g.keys;
  // [batch..., S, E], {U_axes of T (and G)} when T (or G) is split
  auto dv = detail::contract_queries<dims>(probs, dout);
  auto ds = einsum<E>(dout, v);  // dL/dprobs, overwritten by dL/dscores
  static_assert(std::is_same_v<decltype(ds), Pt>,
                "tpx: causal_attention_backward: dout must have the batch dims of q, in q's order "
                "and split alike, and T split as q's");
  auto rowdot = make_per_row<per_row_t<Pt>>(probs);
  Space::template reduce_rows<kernels::sum_reducer<float>>(
      ctx, g.rows, cols, kernels::product_term<T>{probs.data(), ds.data(), cols}, rowdot.data());
  Space::for_each_element(
      ctx, g.rows, cols,
      kernels::softmax_backward_write<T>{probs.data(), rowdot.data(), cols, g.scale, ds.data()});
  auto dq = einsum<S>(ds, k);                       // [batch..., T, E]
  auto dk = detail::contract_queries<dims>(ds, q);  // [batch..., S, E], partial like dv
  return attention_gradients<decltype(dq), decltype(dk), decltype(dv)>{std::move(dq), std::move(dk),
                                                                       std::move(dv)};
}

}  // namespace tpx::nn

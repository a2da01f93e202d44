// einsum<Contracted...>(a, b): batched contractions over named dims, with the collectives chosen
// at compile time, as matmul's are; the transformer's attention products are the example.
//
//   auto s = tpx::einsum<E>(q, k);     // Q[B_X, H_Y, T, E] *_E K[B_X, H_Y, S, E]
//                                      //   -> S[B_X, H_Y, T, S]
//   auto o = tpx::einsum<S>(p, v);     // P[B_X, H_Y, T, S] *_S V[B_X, H_Y, S, E]
//                                      //   -> O[B_X, H_Y, T, E]
//   auto c = tpx::einsum<J, K>(a, b);  // A[I, J, K] *_{J, K} B[J, K, L] -> C[I, L]
//   auto d = tpx::contract<J>(x, y);   // X[I, J] *_J Y[J, I] -> D[I]   (I is a batch dim)
//
// A small einsum over names: the dims listed are contracted (summed over); every other dim that
// both operands have is a batch dim; the rest are free. The result is
// [batch dims in the left operand's order, the left's free dims, the right's free dims], the
// notes' notation for it is einsum_traits<L, R, Contracted...>::description, e.g.
// "AllGather<Y>(rhs, E); batched GEMM over B, H; -> [B_X, H, T, S]", and ::lhs_steps,
// ::rhs_steps and ::result are the plan as types. contract<J...>(a, b) (ops/matmul.hpp) is the same
// operation: it keeps the two-dim matmul code for two matrices that share exactly one dim and comes
// here for everything else. At least one dim is contracted (an outer product is not a contraction).
//
// The sharding rules, decided at compile time, with a sentence naming the dim and the axis when a
// pair is rejected:
//  - a batch dim must be split over the same axes, in the same order, on both sides; its axes
//    are carried to the result with no communication. A batch dim split differently is rejected
//    (reshard one operand first): gathering one side's batch dim would move a whole activation
//    behind the user's back, where slicing the other side would have been free.
//  - each contracted dim follows the notes' cases 2 and 3, independently of the others: the
//    splits both sides share (their common outer axes) are kept, and the result is unreduced
//    over them; the rest are all-gathered on the side that has them, innermost first.
//  - case 4: a mesh axis that splits a free dim of each operand is all-gathered from the right
//    operand's free dim (from that split inward), keeping the left operand's, as matmul does.
//  - partial sums: an operand unreduced over X may meet an operand that does not use X (the
//    result stays unreduced over X); anything else must be reduced first.
// For two matrices sharing one dim these are matmul's rules, and the plans are the same (the
// property test asserts it for every pair of its shardings).
//
// The local product is one batched GEMM (the space's gemm_batched: a loop of BLAS calls on the
// host, one cuBLASLt strided-batched call on the GPU) over the product of the local extents of
// the batch dims, each product a matrix [free dims] x [contracted dims] of contiguous blocks. That
// needs each operand stored as [batch dims (in the left operand's order), then its free dims and
// its contracted dims as two groups], the contracted dims in the same order on both sides; which
// group comes first is free (it becomes a BLAS transpose flag, as in matmul). An operand stored
// otherwise, say K[B, S, H, E] whose batch dim H is not leading, is first copied into that layout
// by a local transpose (kernels/permute.hpp run by the space's for_each_element): one read and
// one write of its local block, and a temporary of its size. The description says when that
// happens ("Transpose(rhs -> [B, H, S, E]); "). Of the two orders of the contracted dims (the
// left's, the right's), the one that copies fewer operands is used.
// einsum_impl hands the sized GEMMs (local_products) to a store, by default one batched GEMM
// into the result; nn/gelu_product.hpp's stores fuse GELU into it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tpx/core/compile_error.hpp"
#include "tpx/ops/permute.hpp"
#include "tpx/ops/plan.hpp"
#include "tpx/ops/reshard.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

// A sharded batched contraction: gathers on each side, the layouts the local GEMMs read, the
// result's sharding. Dims are positions in their operand.
struct einsum_plan {
  step_list lhs_steps;
  step_list rhs_steps;
  sharding_desc result;         // [batch..., lhs free..., rhs free...]{U_...}
  int result_side[max_dims]{};  // where result dim p comes from: 0 the left operand, 1 the right
  int result_pos[max_dims]{};   // and its position there
  int n_batch = 0, n_lhs_free = 0, n_rhs_free = 0, n_contract = 0;
  int rhs_batch[max_dims]{};     // the right operand's position of batch dim i (result dim i)
  int lhs_contract[max_dims]{};  // contracted dims, in the order the GEMM flattens them
  int rhs_contract[max_dims]{};
  // The layout each GEMM operand is read in: order[i] is the dim stored i-th. When `permuted`,
  // the operand is copied into that order first; otherwise it is the operand's own order.
  int lhs_order[max_dims]{};
  int rhs_order[max_dims]{};
  bool lhs_permuted = false, rhs_permuted = false;
  // BLAS transpose flags: the left operand read as [contracted, free], the right as [free,
  // contracted].
  bool trans_a = false, trans_b = false;
  static_string<320> error;
};

namespace detail {

// Appends "H_XY" (dim d of s with its splits) to out.
template <std::size_t N, class Universe>
constexpr void append_dim(static_string<N>& out, const sharding_desc& s, int d, Universe) {
  const auto& names = axis_names<Universe>::value;
  out += s.dim_name[d];
  if (s.n_axes[d] > 0) out += "_";
  for (int i = 0; i < s.n_axes[d]; ++i) out += names[s.axis[d][i]];
}

// "E" or "{J, K}": the contracted dims as einsum's notation writes them after "*_".
template <std::size_t N>
constexpr void append_contracted(static_string<N>& out, const char* const* names, int n) {
  if (n != 1) out += "{";
  for (int c = 0; c < n; ++c) {
    if (c > 0) out += ", ";
    out += names[c];
  }
  if (n != 1) out += "}";
}

// Whether an operand stores exactly [first..., second..., third...] (positions), in that order.
constexpr bool stored_as(const int* first, int n1, const int* second, int n2, const int* third,
                         int n3) {
  int at = 0;
  for (int i = 0; i < n1; ++i)
    if (first[i] != at++) return false;
  for (int i = 0; i < n2; ++i)
    if (second[i] != at++) return false;
  for (int i = 0; i < n3; ++i)
    if (third[i] != at++) return false;
  return true;
}

constexpr void store_order(int* order, const int* first, int n1, const int* second, int n2,
                           const int* third, int n3) {
  int at = 0;
  for (int i = 0; i < n1; ++i) order[at++] = first[i];
  for (int i = 0; i < n2; ++i) order[at++] = second[i];
  for (int i = 0; i < n3; ++i) order[at++] = third[i];
}

}  // namespace detail

// The rules at the top of the file, for lhs and rhs contracted over the dims named in
// contract[0, n_contract).
template <class Universe>
constexpr einsum_plan plan_einsum(const sharding_desc& lhs, const sharding_desc& rhs,
                                  const char* const* contract, int n_contract) {
  const auto& names = axis_names<Universe>::value;
  einsum_plan plan;
  auto start = [&]() -> static_string<320>& {
    plan.error += "tpx: einsum ";
    append_notation(plan.error, lhs, Universe{});
    plan.error += " *_";
    detail::append_contracted(plan.error, contract, n_contract);
    plan.error += " ";
    append_notation(plan.error, rhs, Universe{});
    plan.error += ": ";
    return plan.error;
  };

  // Which dims are contracted, batch or free.
  bool lhs_contracted[max_dims]{}, rhs_contracted[max_dims]{};
  for (int c = 0; c < n_contract; ++c) {
    for (int e = 0; e < c; ++e)
      if (sharding_desc::same_name(contract[c], contract[e])) {
        start() += "dim ";
        plan.error += contract[c];
        plan.error += " is named twice";
        return plan;
      }
    const int pl = lhs.dim_named(contract[c]), pr = rhs.dim_named(contract[c]);
    if (pl < 0 || pr < 0) {
      start() += pl < 0 ? "the left operand has no dim " : "the right operand has no dim ";
      plan.error += contract[c];
      return plan;
    }
    lhs_contracted[pl] = rhs_contracted[pr] = true;
  }
  int lhs_batch[max_dims]{}, lhs_free[max_dims]{}, rhs_free[max_dims]{};
  int lhs_contract[max_dims]{}, rhs_contract[max_dims]{};  // each in its operand's order
  int nb = 0, nlf = 0, nrf = 0, nc = 0;
  for (int d = 0; d < lhs.ndims; ++d) {
    if (lhs_contracted[d]) {
      lhs_contract[nc++] = d;
    } else if (const int pr = rhs.dim_named(lhs.dim_name[d]); pr >= 0) {
      plan.rhs_batch[nb] = pr;
      lhs_batch[nb++] = d;
    } else {
      lhs_free[nlf++] = d;
    }
  }
  for (int d = 0, c = 0; d < rhs.ndims; ++d) {
    if (rhs_contracted[d])
      rhs_contract[c++] = d;
    else if (lhs.dim_named(rhs.dim_name[d]) < 0)
      rhs_free[nrf++] = d;
  }
  if (nb + nlf + nrf > max_dims) {
    start() += "the result would have more dims than a tensor may (8)";
    return plan;
  }

  // Partial sums meet only operands that leave their axis alone.
  for (int side = 0; side < 2; ++side) {
    const sharding_desc& s = side == 0 ? lhs : rhs;
    const sharding_desc& o = side == 0 ? rhs : lhs;
    for (int i = 0; i < s.n_unreduced; ++i)
      if (o.uses_axis(s.unreduced[i])) {
        start() += side == 0 ? "the left operand is unreduced over "
                             : "the right operand is unreduced over ";
        plan.error += names[s.unreduced[i]];
        plan.error += side == 0 ? " and the right one also uses " : " and the left one also uses ";
        plan.error += names[s.unreduced[i]];
        plan.error += side == 0 ? ": reduce the left operand first (all_reduce or reduce_scatter)"
                                : ": reduce the right operand first (all_reduce or reduce_scatter)";
        return plan;
      }
  }
  // Batch dims: split the same way on both sides.
  for (int i = 0; i < nb; ++i) {
    const int pl = lhs_batch[i], pr = plan.rhs_batch[i];
    bool same = lhs.n_axes[pl] == rhs.n_axes[pr];
    for (int a = 0; same && a < lhs.n_axes[pl]; ++a) same = lhs.axis[pl][a] == rhs.axis[pr][a];
    if (!same) {
      start() += "batch dim ";
      plan.error += lhs.dim_name[pl];
      plan.error += " is split as ";
      detail::append_dim(plan.error, lhs, pl, Universe{});
      plan.error += " on the left and as ";
      detail::append_dim(plan.error, rhs, pr, Universe{});
      plan.error +=
          " on the right: a batch dim must be split over the same mesh axes on both "
          "sides (reshard one operand first)";
      return plan;
    }
  }

  sharding_desc l = lhs, r = rhs;
  // Cases 2 and 3, per contracted dim: keep the common outer splits, gather the rest.
  int kept[max_axes]{}, n_kept = 0;
  for (int c = 0; c < nc; ++c) {
    const int jl = lhs_contract[c], jr = rhs.dim_named(lhs.dim_name[jl]);
    const int keep = detail::common_prefix(l, jl, r, jr);
    while (l.n_axes[jl] > keep) {
      plan.lhs_steps.push({step_kind::all_gather, l.axis[jl][l.n_axes[jl] - 1], jl, 0});
      detail::remove_last_axis(l, jl);
    }
    while (r.n_axes[jr] > keep) {
      plan.rhs_steps.push({step_kind::all_gather, r.axis[jr][r.n_axes[jr] - 1], jr, 0});
      detail::remove_last_axis(r, jr);
    }
    for (int i = 0; i < keep; ++i) kept[n_kept++] = l.axis[jl][i];
  }
  // Case 4: an axis splitting a free dim on each side is gathered from the right's, from the
  // outermost conflicting split inward.
  for (int f = 0; f < nrf; ++f) {
    const int kr = rhs_free[f];
    int conflict = -1;
    for (int i = r.n_axes[kr] - 1; i >= 0; --i)
      for (int g = 0; g < nlf; ++g)
        if (l.dim_has_axis(lhs_free[g], r.axis[kr][i])) conflict = i;
    if (conflict >= 0)
      while (r.n_axes[kr] > conflict) {
        plan.rhs_steps.push({step_kind::all_gather, r.axis[kr][r.n_axes[kr] - 1], kr, 0});
        detail::remove_last_axis(r, kr);
      }
  }

  // The result: [batch, lhs free, rhs free]{U_lhs, U_rhs, kept}.
  sharding_desc& out = plan.result;
  auto add_dim = [&](const sharding_desc& s, int side, int d) {
    const int p = out.ndims++;
    out.dim_name[p] = s.dim_name[d];
    plan.result_side[p] = side;
    plan.result_pos[p] = d;
    for (int i = 0; i < s.n_axes[d]; ++i) detail::append_axis(out, p, s.axis[d][i]);
  };
  for (int i = 0; i < nb; ++i) add_dim(l, 0, lhs_batch[i]);
  for (int i = 0; i < nlf; ++i) add_dim(l, 0, lhs_free[i]);
  for (int i = 0; i < nrf; ++i) add_dim(r, 1, rhs_free[i]);
  for (int i = 0; i < l.n_unreduced; ++i) out.unreduced[out.n_unreduced++] = l.unreduced[i];
  for (int i = 0; i < r.n_unreduced; ++i) out.unreduced[out.n_unreduced++] = r.unreduced[i];
  for (int i = 0; i < n_kept; ++i) out.unreduced[out.n_unreduced++] = kept[i];
  plan.n_batch = nb;
  plan.n_lhs_free = nlf;
  plan.n_rhs_free = nrf;
  plan.n_contract = nc;

  // Layouts. Contracted dims in the left's order (option 0) or the right's (option 1).
  int best_copies = 3;
  for (int option = 0; option < 2; ++option) {
    int cl[max_dims]{}, cr[max_dims]{};
    for (int c = 0; c < nc; ++c) {
      if (option == 0) {
        cl[c] = lhs_contract[c];
        cr[c] = rhs.dim_named(lhs.dim_name[cl[c]]);
      } else {
        cr[c] = rhs_contract[c];
        cl[c] = lhs.dim_named(rhs.dim_name[cr[c]]);
      }
    }
    const bool a_plain = detail::stored_as(lhs_batch, nb, lhs_free, nlf, cl, nc);
    const bool a_trans = detail::stored_as(lhs_batch, nb, cl, nc, lhs_free, nlf);
    const bool b_plain = detail::stored_as(plan.rhs_batch, nb, cr, nc, rhs_free, nrf);
    const bool b_trans = detail::stored_as(plan.rhs_batch, nb, rhs_free, nrf, cr, nc);
    const int copies = (a_plain || a_trans ? 0 : 1) + (b_plain || b_trans ? 0 : 1);
    if (copies >= best_copies) continue;
    best_copies = copies;
    for (int c = 0; c < nc; ++c) {
      plan.lhs_contract[c] = cl[c];
      plan.rhs_contract[c] = cr[c];
    }
    plan.lhs_permuted = !(a_plain || a_trans);
    plan.trans_a = !a_plain && a_trans;
    plan.rhs_permuted = !(b_plain || b_trans);
    plan.trans_b = !b_plain && b_trans;
    // A copy keeps the operand's innermost dim innermost where it can, so that it reads runs.
    if (!plan.lhs_permuted) {
      for (int d = 0; d < lhs.ndims; ++d) plan.lhs_order[d] = d;
    } else if (lhs_contracted[lhs.ndims - 1] || nlf == 0) {  // [batch, free, contracted]
      detail::store_order(plan.lhs_order, lhs_batch, nb, lhs_free, nlf, cl, nc);
    } else {  // [batch, contracted, free], read transposed
      detail::store_order(plan.lhs_order, lhs_batch, nb, cl, nc, lhs_free, nlf);
      plan.trans_a = true;
    }
    if (!plan.rhs_permuted) {
      for (int d = 0; d < rhs.ndims; ++d) plan.rhs_order[d] = d;
    } else if (!rhs_contracted[rhs.ndims - 1] || nrf == 0) {  // [batch, contracted, free]
      detail::store_order(plan.rhs_order, plan.rhs_batch, nb, cr, nc, rhs_free, nrf);
    } else {  // [batch, free, contracted], read transposed
      detail::store_order(plan.rhs_order, plan.rhs_batch, nb, rhs_free, nrf, cr, nc);
      plan.trans_b = true;
    }
  }
  return plan;
}

namespace detail {

// Result dim P of an einsum plan as a type: the operand's dim, split over the plan's axes.
template <class Traits, int P, class Indices>
struct einsum_result_dim;
template <class Traits, int P, std::size_t... I>
struct einsum_result_dim<Traits, P, std::index_sequence<I...>> {
  using source =
      type_at_t<Traits::plan.result_pos[P],
                std::conditional_t<Traits::plan.result_side[P] == 0, typename Traits::lhs_dims,
                                   typename Traits::rhs_dims>>;
  using type = typename source::template with_axes<
      type_at_t<Traits::plan.result.axis[P][I], typename Traits::universe>...>;
};

template <class Traits, class Dims, class Unred>
struct einsum_result_parts;
template <class Traits, std::size_t... P, std::size_t... U>
struct einsum_result_parts<Traits, std::index_sequence<P...>, std::index_sequence<U...>> {
  using dims = type_list<typename einsum_result_dim<
      Traits, P, std::make_index_sequence<Traits::plan.result.n_axes[P]>>::type...>;
  using unreduced =
      Unreduced<type_at_t<Traits::plan.result.unreduced[U], typename Traits::universe>...>;
};

// The result type of a possible plan (void for an impossible one, whose error is reported
// instead).
template <class Traits, class L, bool Possible>
struct einsum_result {
  using type = void;
};
template <class Traits, class L>
struct einsum_result<Traits, L, true> {
  using parts = einsum_result_parts<Traits, std::make_index_sequence<Traits::plan.result.ndims>,
                                    std::make_index_sequence<Traits::plan.result.n_unreduced>>;
  using type = tensor_with_t<L, typename parts::dims, typename parts::unreduced>;
};

}  // namespace detail

template <AnyTensor L, AnyTensor R, Dim... Contracted>
struct einsum_traits {
  using universe = unique_t<concat_t<typename L::traits::axes, typename R::traits::axes>>;
  using lhs_dims = typename L::dims;
  using rhs_dims = typename R::dims;
  static constexpr sharding_desc lhs = L::traits::parts::template describe<universe>();
  static constexpr sharding_desc rhs = R::traits::parts::template describe<universe>();
  static constexpr const char* contracted[sizeof...(Contracted) + 1] = {Contracted::name.c_str()...,
                                                                        ""};
  static constexpr einsum_plan plan =
      plan_einsum<universe>(lhs, rhs, contracted, static_cast<int>(sizeof...(Contracted)));
  static constexpr bool possible = plan.error.size() == 0;

  using lhs_steps = detail::step_types_t<universe, typename L::dims, plan.lhs_steps>;
  using rhs_steps = detail::step_types_t<universe, typename R::dims, plan.rhs_steps>;
  using result = typename detail::einsum_result<einsum_traits, L, possible>::type;

  // "E" or "{J, K}"
  static constexpr auto label = freeze<[] {
    static_string<80> text;
    detail::append_contracted(text, contracted, static_cast<int>(sizeof...(Contracted)));
    return text;
  }>();

  // "AllGather<Y>(rhs, E); Transpose(rhs -> [B, H, E, S]); batched GEMM over B, H; -> [B_X, H, T,
  // S]"
  static constexpr auto description = freeze<[] {
    static_string<400> text;
    append_steps(text, plan.lhs_steps, lhs, "lhs", universe{});
    append_steps(text, plan.rhs_steps, rhs, "rhs", universe{});
    for (int side = 0; side < 2; ++side) {
      if (!(side == 0 ? plan.lhs_permuted : plan.rhs_permuted)) continue;
      const sharding_desc& s = side == 0 ? lhs : rhs;
      text += side == 0 ? "Transpose(lhs -> [" : "Transpose(rhs -> [";
      for (int i = 0; i < s.ndims; ++i) {
        if (i != 0) text += ", ";
        text += s.dim_name[(side == 0 ? plan.lhs_order : plan.rhs_order)[i]];
      }
      text += "]); ";
    }
    if (plan.n_batch != 0) {
      text += "batched GEMM over ";
      for (int i = 0; i < plan.n_batch; ++i) {
        if (i != 0) text += ", ";
        text += plan.result.dim_name[i];
      }
      text += "; -> ";
    } else {
      text += "GEMM; -> ";
    }
    append_notation(text, plan.result, universe{});
    return text;
  }>();
};

// Whether einsum<Contracted...>(l, r) compiles, without compiling it.
template <class L, class R, class... Contracted>
inline constexpr bool can_einsum_v = einsum_traits<L, R, unsplit_t<Contracted>...>::possible;

namespace detail {

// The local GEMMs of a contraction, as einsum_impl sizes them: `batch` products
// op(a)[m, k] op(b)[k, n], the i-th reading a + i * stride_a and b + i * stride_b, whose results
// are the result's [m, n] blocks, i * m * n elements apart.
template <class T>
struct local_products {
  bool trans_a = false, trans_b = false;
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  const T* a = nullptr;
  std::int64_t lda = 1, stride_a = 0;
  const T* b = nullptr;
  std::int64_t ldb = 1, stride_b = 0;
};

// How einsum stores the products: plainly, one batched GEMM into the result. A fused store
// (nn/gelu_product.hpp) applies a function in the GEMM's epilogue instead.
struct plain_products {
  template <AnyTensor Result, class T>
  void operator()(Result& out, const local_products<T>& p) const {
    Result::space::gemm_batched(out.context(), p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, p.a, p.lda,
                                p.stride_a, p.b, p.ldb, p.stride_b, 0.0f, out.data(),
                                std::max<std::int64_t>(p.n, 1), p.m * p.n, p.batch);
  }
};

template <class Traits, AnyTensor L, AnyTensor R, class Store = plain_products>
auto einsum_impl(const L& a, const R& b, Store&& store = {}) {
  using universe = typename Traits::universe;
  using Space = typename L::space;
  using T = typename L::value_type;
  const rank_context& ctx = a.context();
  auto mismatch = [&](const char* dim, std::int64_t left, std::int64_t right) {
    throw std::invalid_argument("tpx: einsum " + std::string(L::notation.c_str()) + " *_" +
                                Traits::label.c_str() + " " + R::notation.c_str() + ": dim " + dim +
                                " has extent " + std::to_string(left) + " on the left and " +
                                std::to_string(right) + " on the right (rank " +
                                std::to_string(ctx.world_rank()) + ")");
  };
  for (int i = 0; i < Traits::plan.n_batch; ++i)
    if (a.global_extent(Traits::plan.result_pos[i]) != b.global_extent(Traits::plan.rhs_batch[i]))
      mismatch(Traits::plan.result.dim_name[i], a.global_extent(Traits::plan.result_pos[i]),
               b.global_extent(Traits::plan.rhs_batch[i]));
  for (int c = 0; c < Traits::plan.n_contract; ++c)
    if (a.global_extent(Traits::plan.lhs_contract[c]) !=
        b.global_extent(Traits::plan.rhs_contract[c]))
      mismatch(Traits::lhs.dim_name[Traits::plan.lhs_contract[c]],
               a.global_extent(Traits::plan.lhs_contract[c]),
               b.global_extent(Traits::plan.rhs_contract[c]));

  const auto& lhs = apply_steps<universe, Traits::plan.lhs_steps>(a);  // a itself if no step
  const auto& rhs = apply_steps<universe, Traits::plan.rhs_steps>(b);
  using Result = typename Traits::result;
  index_array<Result::order> shape{};
  for (std::size_t p = 0; p < Result::order; ++p)
    shape[p] = Traits::plan.result_side[p] == 0 ? a.global_extent(Traits::plan.result_pos[p])
                                                : b.global_extent(Traits::plan.result_pos[p]);
  Result out(ctx, typename Result::shape_type(shape), for_overwrite);  // written whole by the GEMMs

  // The GEMMs' sizes: batch, m (left free), n (right free), k (contracted), from local blocks.
  std::int64_t batch = 1, m = 1, n = 1, k = 1, k_right = 1;
  for (int i = 0; i < Traits::plan.n_batch; ++i) batch *= out.local_extent(i);
  for (int i = 0; i < Traits::plan.n_lhs_free; ++i) m *= out.local_extent(Traits::plan.n_batch + i);
  for (int i = 0; i < Traits::plan.n_rhs_free; ++i)
    n *= out.local_extent(Traits::plan.n_batch + Traits::plan.n_lhs_free + i);
  for (int c = 0; c < Traits::plan.n_contract; ++c) {
    k *= lhs.local_extent(Traits::plan.lhs_contract[c]);
    k_right *= rhs.local_extent(Traits::plan.rhs_contract[c]);
  }
  if (k != k_right || static_cast<std::size_t>(batch * m * k) != lhs.size() ||
      static_cast<std::size_t>(batch * k * n) != rhs.size())
    throw std::logic_error("tpx: einsum: local blocks do not line up (a tpx bug)");

  typename Space::template buffer<T> lhs_copy, rhs_copy;
  const T* a_data = lhs.data();
  const T* b_data = rhs.data();
  if constexpr (Traits::plan.lhs_permuted) {
    lhs_copy = permuted_block<Space>(ctx, lhs.data(), lhs.local_extents(), Traits::plan.lhs_order);
    a_data = lhs_copy.data();
  }
  if constexpr (Traits::plan.rhs_permuted) {
    rhs_copy = permuted_block<Space>(ctx, rhs.data(), rhs.local_extents(), Traits::plan.rhs_order);
    b_data = rhs_copy.data();
  }
  // lhs read as [m, k] or (trans_a) [k, m]; rhs as [k, n] or (trans_b) [n, k]; out is [m, n].
  auto leading = [](std::int64_t cols) { return std::max<std::int64_t>(cols, 1); };  // BLAS
  store(out, local_products<T>{.trans_a = Traits::plan.trans_a,
                               .trans_b = Traits::plan.trans_b,
                               .batch = batch, .m = m, .n = n, .k = k,
                               .a = a_data, .lda = leading(Traits::plan.trans_a ? m : k),
                               .stride_a = m * k,
                               .b = b_data, .ldb = leading(Traits::plan.trans_b ? k : n),
                               .stride_b = k * n});
  return out;
}

template <class... Contracted, AnyTensor L, AnyTensor R>
auto einsum_checked(const L& a, const R& b) {
  using traits = einsum_traits<L, R, Contracted...>;
  if constexpr (!std::is_same_v<typename L::space, typename R::space> ||
                !std::is_same_v<typename L::value_type, typename R::value_type>) {
    compile_error<"tpx: einsum " + L::notation + " * " + R::notation +
                  ": the operands must have the same element type and memory space">{};
  } else if constexpr (!traits::possible) {
    compile_error<freeze<[] { return traits::plan.error; }>()>{};
  } else {
    return einsum_impl<traits>(a, b);
  }
}

}  // namespace detail

// a *_{C, ...} b: contract the dims named C..., batch over the other dims both operands have.
template <Dim C, Dim... Cs, AnyTensor L, AnyTensor R>
auto einsum(const L& a, const R& b) {
  return detail::einsum_checked<unsplit_t<C>, unsplit_t<Cs>...>(a, b);
}
template <template <class...> class C, template <class...> class... Cs, AnyTensor L, AnyTensor R>
auto einsum(const L& a, const R& b) {
  return detail::einsum_checked<C<>, Cs<>...>(a, b);
}

}  // namespace tpx

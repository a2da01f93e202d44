// The planners: which collectives turn one sharding into another (reshard), and which a sharded
// matmul needs (the notes' four cases). Both run during compilation.
//
// They work on sharding_desc values (dims and axes as small integers), step through the
// sharding as the collectives would change it, and record each step. Nothing here moves data:
// ops/reshard.hpp and ops/matmul.hpp turn a plan into calls of the typed collectives, and into a
// type_list of steps (sharding/steps.hpp) that tests static_assert on. A plan that cannot be
// carried out records why, in a sentence naming the dims and axes, which becomes the
// compile_error.
#pragma once

#include "tpx/core/fixed_string.hpp"
#include "tpx/sharding/sharding.hpp"

namespace tpx {

enum class step_kind { all_gather, reduce_scatter, all_reduce, all_to_all, slice };

struct plan_step {
  step_kind kind = step_kind::all_gather;
  int axis = 0;    // id in the plan's universe of axes
  int dim = 0;     // position of the dim acted on (the source dim of an all_to_all)
  int to_dim = 0;  // all_to_all: position of the target dim
};

struct step_list {
  static constexpr int capacity = 24;
  plan_step steps[capacity]{};
  int count = 0;
  constexpr void push(plan_step s) { steps[count++] = s; }
};

struct reshard_plan {
  step_list steps;
  static_string<240> error;
};

namespace detail {

constexpr int common_prefix(const sharding_desc& a, int da, const sharding_desc& b, int db) {
  int n = 0;
  while (n < a.n_axes[da] && n < b.n_axes[db] && a.axis[da][n] == b.axis[db][n]) ++n;
  return n;
}

constexpr void remove_last_axis(sharding_desc& s, int d) { --s.n_axes[d]; }
constexpr void append_axis(sharding_desc& s, int d, int a) { s.axis[d][s.n_axes[d]++] = a; }
constexpr void remove_unreduced(sharding_desc& s, int a) {
  int kept = 0;
  for (int i = 0; i < s.n_unreduced; ++i)
    if (s.unreduced[i] != a) s.unreduced[kept++] = s.unreduced[i];
  s.n_unreduced = kept;
}

}  // namespace detail

// Steps from `from` to `to` (same dims, same order). Strategy:
//  1. remove every split that `to` does not have at that place, innermost first: an axis that
//     `to` wants next on another dim moves there by all_to_all, any other is all-gathered;
//  2. add the splits `to` has and `from` lacks, outermost first: an axis the tensor is unreduced
//     over is reduce-scattered onto the dim, an unused one is sliced (no communication);
//  3. all-reduce the remaining unreduced axes that `to` does not keep.
template <class Universe>
constexpr reshard_plan plan_reshard(const sharding_desc& from, const sharding_desc& to) {
  const auto& names = axis_names<Universe>::value;
  reshard_plan plan;
  auto fail = [&](const char* what) {
    plan.error += "tpx: reshard ";
    append_notation(plan.error, from, Universe{});
    plan.error += " -> ";
    append_notation(plan.error, to, Universe{});
    plan.error += ": ";
    plan.error += what;
    return plan;
  };
  if (from.ndims != to.ndims) return fail("the tensors have different dims");
  for (int d = 0; d < from.ndims; ++d)
    if (!sharding_desc::same_name(from.dim_name[d], to.dim_name[d]))
      return fail("the dims differ or are in another order (tpx does not transpose)");
  for (int i = 0; i < to.n_unreduced; ++i)
    if (!from.is_unreduced(to.unreduced[i])) {
      plan.error += "tpx: reshard to an unreduced tensor over ";
      plan.error += names[to.unreduced[i]];
      plan.error += " from one that is not: use embed<Axis, Dim> to make partial sums";
      return plan;
    }

  sharding_desc cur = from;
  for (;;) {  // 1. remove splits
    int d = 0;
    while (d < cur.ndims && detail::common_prefix(cur, d, to, d) == cur.n_axes[d]) ++d;
    if (d == cur.ndims) break;
    const int a = cur.axis[d][cur.n_axes[d] - 1];
    int target = -1;
    for (int j = 0; j < cur.ndims; ++j)
      if (j != d && detail::common_prefix(cur, j, to, j) == cur.n_axes[j] &&
          cur.n_axes[j] < to.n_axes[j] && to.axis[j][cur.n_axes[j]] == a)
        target = j;
    detail::remove_last_axis(cur, d);
    if (target >= 0) {
      plan.steps.push({step_kind::all_to_all, a, d, target});
      detail::append_axis(cur, target, a);
    } else {
      plan.steps.push({step_kind::all_gather, a, d, 0});
    }
  }
  for (int d = 0; d < cur.ndims; ++d)  // 2. add splits
    while (cur.n_axes[d] < to.n_axes[d]) {
      const int a = to.axis[d][cur.n_axes[d]];
      if (cur.is_unreduced(a)) {
        plan.steps.push({step_kind::reduce_scatter, a, d, 0});
        detail::remove_unreduced(cur, a);
      } else {
        plan.steps.push({step_kind::slice, a, d, 0});
      }
      detail::append_axis(cur, d, a);
    }
  for (int i = 0; i < from.n_unreduced; ++i) {  // 3. reduce the rest
    const int a = from.unreduced[i];
    if (cur.is_unreduced(a) && !to.is_unreduced(a)) {
      plan.steps.push({step_kind::all_reduce, a, 0, 0});
      detail::remove_unreduced(cur, a);
    }
  }
  return plan;
}

// A sharded matmul: gathers on each side, then the local GEMM, then the result's sharding.
struct matmul_plan {
  step_list lhs_steps;
  step_list rhs_steps;
  sharding_desc result;  // [lhs free dim, rhs free dim]{U_...}
  int lhs_contract = 0;  // position of the contracted dim in each operand
  int rhs_contract = 0;
  static_string<300> error;
};

enum class gather_preference { rhs, lhs };

// The notes' four cases, for lhs [I, J] and rhs [J, K] contracted over J (in either position):
//  1. J unsplit on both sides: local GEMM;
//  2. J split on one side only: all-gather that side's J (innermost split first);
//  3. J split the same way on both: local GEMM, result unreduced over J's axes. Where the
//     splits differ, both sides are gathered down to their common outer splits;
//  4. I and K split over the same axis: all-gather one side's free dim (by default the right
//     operand's, keeping the activations' batch split; `prefer` picks the left one);
// and the rule for partial sums: an operand unreduced over X may meet an operand that does not
// use X at all (the product stays unreduced over X); anything else needs a reduction first.
template <class Universe>
constexpr matmul_plan plan_matmul(const sharding_desc& lhs, const sharding_desc& rhs,
                                  const char* contract, gather_preference prefer) {
  const auto& names = axis_names<Universe>::value;
  matmul_plan plan;
  auto fail = [&](const char* what, const char* name1 = "", const char* what2 = "",
                  const char* name2 = "", const char* what3 = "") {
    plan.error += "tpx: matmul ";
    append_notation(plan.error, lhs, Universe{});
    plan.error += " *_";
    plan.error += contract;
    plan.error += " ";
    append_notation(plan.error, rhs, Universe{});
    plan.error += ": ";
    plan.error += what;
    plan.error += name1;
    plan.error += what2;
    plan.error += name2;
    plan.error += what3;
    return plan;
  };
  if (lhs.ndims != 2 || rhs.ndims != 2) return fail("both operands must have two dims");
  const int jl = lhs.dim_named(contract), jr = rhs.dim_named(contract);
  if (jl < 0) return fail("the left operand has no dim ", contract);
  if (jr < 0) return fail("the right operand has no dim ", contract);
  const int il = 1 - jl, kr = 1 - jr;
  if (sharding_desc::same_name(lhs.dim_name[il], rhs.dim_name[kr]))
    return fail("both operands have the free dim ", lhs.dim_name[il],
                " (the result would hold it twice)");
  for (int i = 0; i < lhs.n_unreduced; ++i)
    if (rhs.uses_axis(lhs.unreduced[i]))
      return fail("the left operand is unreduced over ", names[lhs.unreduced[i]],
                  " and the right one also uses ", names[lhs.unreduced[i]],
                  ": reduce the left operand first (all_reduce or reduce_scatter)");
  for (int i = 0; i < rhs.n_unreduced; ++i)
    if (lhs.uses_axis(rhs.unreduced[i]))
      return fail("the right operand is unreduced over ", names[rhs.unreduced[i]],
                  " and the left one also uses ", names[rhs.unreduced[i]],
                  ": reduce the right operand first (all_reduce or reduce_scatter)");

  sharding_desc l = lhs, r = rhs;
  // Cases 2 and 3: keep the common outer splits of J, gather the rest on each side.
  const int keep = detail::common_prefix(l, jl, r, jr);
  while (l.n_axes[jl] > keep) {
    plan.lhs_steps.push({step_kind::all_gather, l.axis[jl][l.n_axes[jl] - 1], jl, 0});
    detail::remove_last_axis(l, jl);
  }
  while (r.n_axes[jr] > keep) {
    plan.rhs_steps.push({step_kind::all_gather, r.axis[jr][r.n_axes[jr] - 1], jr, 0});
    detail::remove_last_axis(r, jr);
  }
  // Case 4: an axis splitting both free dims. Gather the chosen side's free dim from the
  // conflicting split inward.
  int conflict = -1;  // position in the gathered side's free dim
  const bool gather_lhs = prefer == gather_preference::lhs;
  sharding_desc& g = gather_lhs ? l : r;
  const sharding_desc& other = gather_lhs ? r : l;
  const int gd = gather_lhs ? il : kr, od = gather_lhs ? kr : il;
  for (int i = g.n_axes[gd] - 1; i >= 0; --i)
    if (other.dim_has_axis(od, g.axis[gd][i])) conflict = i;
  if (conflict >= 0)
    while (g.n_axes[gd] > conflict) {
      (gather_lhs ? plan.lhs_steps : plan.rhs_steps)
          .push({step_kind::all_gather, g.axis[gd][g.n_axes[gd] - 1], gd, 0});
      detail::remove_last_axis(g, gd);
    }

  plan.lhs_contract = jl;
  plan.rhs_contract = jr;
  sharding_desc& out = plan.result;
  out.ndims = 2;
  out.dim_name[0] = l.dim_name[il];
  out.dim_name[1] = r.dim_name[kr];
  for (int i = 0; i < l.n_axes[il]; ++i) detail::append_axis(out, 0, l.axis[il][i]);
  for (int i = 0; i < r.n_axes[kr]; ++i) detail::append_axis(out, 1, r.axis[kr][i]);
  for (int i = 0; i < l.n_unreduced; ++i) out.unreduced[out.n_unreduced++] = l.unreduced[i];
  for (int i = 0; i < r.n_unreduced; ++i) out.unreduced[out.n_unreduced++] = r.unreduced[i];
  for (int i = 0; i < keep; ++i) out.unreduced[out.n_unreduced++] = l.axis[jl][i];
  return plan;
}

// "AllGather<Y>(lhs, D); " etc., appended to out.
template <std::size_t N, class Universe>
constexpr void append_steps(static_string<N>& out, const step_list& steps,
                            const sharding_desc& start, const char* side, Universe) {
  const auto& names = axis_names<Universe>::value;
  constexpr const char* kind_names[] = {"AllGather", "ReduceScatter", "AllReduce", "AllToAll",
                                        "Slice"};
  for (int i = 0; i < steps.count; ++i) {
    const plan_step& s = steps.steps[i];
    out += kind_names[static_cast<int>(s.kind)];
    out += "<";
    out += names[s.axis];
    out += ">";
    if (s.kind != step_kind::all_reduce) {
      out += "(";
      if (side[0] != '\0') {
        out += side;
        out += ", ";
      }
      out += start.dim_name[s.dim];
      if (s.kind == step_kind::all_to_all) {
        out += " -> ";
        out += start.dim_name[s.to_dim];
      }
      out += ")";
    }
    out += "; ";
  }
}

}  // namespace tpx

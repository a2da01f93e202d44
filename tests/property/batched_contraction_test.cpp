// Property: tpx::einsum (batched contractions over named dims, include/tpx/ops/einsum.hpp) equals
// a naive loop over the global tensors, for every sharding of its operands that the test
// generates, on meshes 1x1, 2x2 and 2x3, with extents that divide the mesh and extents that do
// not (down to empty blocks). The families of products:
//   scores  [B, H, T, E] *_E [B, H, S, E]    -> [B, H, T, S]  attention's Q K^T
//   values  [B, H, T, S] *_S [B, H, S, E]    -> [B, H, T, E]  attention's P V
//   two     [I, J, K] *_{J, K} [J, K, L]     -> [I, L]        two contracted dims
//   shared  [I, J] *_J [J, I]                -> [I]           issue 13's case: I a batch dim
//   heads   [B, T, H, E] *_E [B, S, H, E]    -> [B, H, T, S]  batch dims not leading
//   order   [I, K, J] *_{J, K} [J, K, L]     -> [I, L]        contracted dims in other orders
//   split   [J, I, K] *_{J, K} [L, J, K]     -> [I, L]        a free dim between contracted ones
//   linear  [B, H, T, E] *_E [E, F]          -> [B, H, T, F]  no batch dim, three free dims
// Each dim is unsplit or split over X or Y (B also over X then Y; in shared, I over all five);
// in scores and two the left operand may also be unreduced over X or Y. The test's own rule says
// which pairs are legal (each batch dim split the same way on both sides; an unreduced axis unused
// by the other operand): tpx must reject every illegal pair at compile time (can_einsum_v; 674
// pairs) and accept the legal ones, which are run (every n-th of a large family: 243 pairs, each
// on 3 meshes x 2 extent sets): the result, reduced, must equal the loop in double within 1e-5 of
// sum |a b| per element (fp32 accumulation).
// The test also checks, over the 18 x 18 two-dim cases of matmul_property_test, that einsum's plan
// of a plain matrix product is matmul's (steps, result type and description). The cases are split
// over TPX_PROPERTY_PART (0..parts-1) so the translation units compile in parallel.
#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../support/sharding_cases.hpp"

using namespace cases;

namespace {

TPX_DIMS(B, H, T, S, E, F, L);

constexpr int part = TPX_PROPERTY_PART;
constexpr int parts = TPX_PROPERTY_PARTS;

// --- The generated shardings ---

// A dim's split as a code: 0 none, 1 X, 2 Y, 3 X then Y, 4 Y then X.
using split_options =
    type_list<type_list<>, type_list<X>, type_list<Y>, type_list<X, Y>, type_list<Y, X>>;
constexpr unsigned axes_mask(int code) {
  return code == 0 ? 0u : code == 1 ? 1u : code == 2 ? 2u : 3u;
}
template <template <class...> class D, int Code>
using dim_t = typename dim_of<D, tpx::type_at_t<Code, split_options>>::type;
// Unreduced codes: 0 none, 1 X, 2 Y.
template <int Code>
using unreduced_t = tpx::type_at_t<Code, type_list<Unreduced<>, Unreduced<X>, Unreduced<Y>>>;

// One pair of shardings.
struct pair_code {
  int lhs[4]{}, rhs[4]{};
  int lhs_unreduced = 0;
  bool legal = true;
};

// A family: its operands' dims, the split codes each dim may take, and which right dims are the
// batch dims of which left dims (tie[r] = left position, or -1).
struct family_spec {
  int nl = 0, nr = 0;
  int lhs_options[4][5]{}, n_lhs_options[4]{};
  int rhs_options[4][5]{}, n_rhs_options[4]{};
  int tie[4]{-1, -1, -1, -1};
  int n_unreduced_options = 1;  // of the left operand: none, X, Y
  int stride = 1;               // keep every stride-th legal pair (a sample of a large family)
};

constexpr bool valid_operand(const int* codes, int n, int unreduced) {
  unsigned used = 0;
  for (int d = 0; d < n; ++d) {
    if ((axes_mask(codes[d]) & used) != 0) return false;
    used |= axes_mask(codes[d]);
  }
  return (axes_mask(unreduced) & used) == 0;
}
constexpr unsigned operand_uses(const int* codes, int n) {
  unsigned used = 0;
  for (int d = 0; d < n; ++d) used |= axes_mask(codes[d]);
  return used;
}

// Every pair of valid operands of the family, legal ones (Legal) or the others; legal ones
// sampled by the family's stride. Written to out when given; returns how many.
constexpr int enumerate_pairs(const family_spec& f, bool legal, pair_code* out) {
  int count = 0, legal_seen = 0;
  int nl_combos = 1, nr_combos = 1;
  for (int d = 0; d < f.nl; ++d) nl_combos *= f.n_lhs_options[d];
  for (int d = 0; d < f.nr; ++d) nr_combos *= f.n_rhs_options[d];
  for (int u = 0; u < f.n_unreduced_options; ++u)
    for (int lc = 0; lc < nl_combos; ++lc) {
      pair_code p;
      p.lhs_unreduced = u;
      for (int d = 0, c = lc; d < f.nl; ++d) {  // combination lc, mixed radix
        p.lhs[d] = f.lhs_options[d][c % f.n_lhs_options[d]];
        c /= f.n_lhs_options[d];
      }
      if (!valid_operand(p.lhs, f.nl, u)) continue;
      for (int rc = 0; rc < nr_combos; ++rc) {
        for (int d = 0, c = rc; d < f.nr; ++d) {
          p.rhs[d] = f.rhs_options[d][c % f.n_rhs_options[d]];
          c /= f.n_rhs_options[d];
        }
        if (!valid_operand(p.rhs, f.nr, 0)) continue;
        p.legal = (axes_mask(u) & operand_uses(p.rhs, f.nr)) == 0;
        for (int d = 0; d < f.nr; ++d)
          if (f.tie[d] >= 0 && p.rhs[d] != p.lhs[f.tie[d]]) p.legal = false;
        if (p.legal != legal) continue;
        if (legal && legal_seen++ % f.stride != 0) continue;
        if (out != nullptr) out[count] = p;
        ++count;
      }
    }
  return count;
}

template <const family_spec& Spec, bool Legal>
constexpr auto pairs_of() {
  std::array<pair_code, enumerate_pairs(Spec, Legal, nullptr)> out{};
  enumerate_pairs(Spec, Legal, out.data());
  return out;
}

template <template <class...> class... Ds>
struct dims {
  static constexpr int size = sizeof...(Ds);
  template <pair_code P, bool Left, std::size_t... Is>
  static auto build(std::index_sequence<Is...>)
      -> tpx::tensor_with_t<tpx::Tensor<float, I<>>,
                            type_list<dim_t<Ds, (Left ? P.lhs[Is] : P.rhs[Is])>...>,
                            unreduced_t<(Left ? P.lhs_unreduced : 0)>>;
  template <pair_code P, bool Left>
  using tensor = decltype(build<P, Left>(std::make_index_sequence<size>{}));
};

constexpr family_spec make_spec(int nl, int nr, std::array<std::array<int, 5>, 4> lo,
                                std::array<int, 4> nlo, std::array<std::array<int, 5>, 4> ro,
                                std::array<int, 4> nro, std::array<int, 4> tie, int unreduced,
                                int stride) {
  family_spec f;
  f.nl = nl;
  f.nr = nr;
  for (int d = 0; d < 4; ++d) {
    for (int o = 0; o < 5; ++o) {
      f.lhs_options[d][o] = lo[d][o];
      f.rhs_options[d][o] = ro[d][o];
    }
    f.n_lhs_options[d] = nlo[d];
    f.n_rhs_options[d] = nro[d];
    f.tie[d] = tie[d];
  }
  f.n_unreduced_options = unreduced;
  f.stride = stride;
  return f;
}

constexpr std::array<int, 5> none_x_y{0, 1, 2}, none_x_xy{0, 1, 3}, none_y{0, 2}, none_x{0, 1},
    any_split{0, 1, 2, 3, 4};

// [B, H, T, E] *_E [B, H, S, E] and [B, H, T, S] *_S [B, H, S, E]: B unsplit, on X or on XY,
// H unsplit or on Y, the rest unsplit, on X or on Y.
constexpr family_spec attention_spec =
    make_spec(4, 4, {none_x_xy, none_y, none_x_y, none_x_y}, {3, 2, 3, 3},
              {none_x_xy, none_y, none_x_y, none_x_y}, {3, 2, 3, 3}, {0, 1, -1, -1}, 1, 2);
constexpr family_spec scores_spec =
    make_spec(4, 4, {none_x_xy, none_y, none_x_y, none_x_y}, {3, 2, 3, 3},
              {none_x_xy, none_y, none_x_y, none_x_y}, {3, 2, 3, 3}, {0, 1, -1, -1}, 3, 3);
// [I, J, K] *_{J, K} [J, K, L], every split of one axis per dim; a sample.
constexpr family_spec two_spec =
    make_spec(3, 3, {none_x_y, none_x_y, none_x_y}, {3, 3, 3}, {none_x_y, none_x_y, none_x_y},
              {3, 3, 3}, {-1, -1, -1, -1}, 3, 4);
// [I, J] *_J [J, I]: I any split (the right's I tied to the left's), J unsplit, X or Y.
constexpr family_spec shared_spec = make_spec(2, 2, {any_split, none_x_y}, {5, 3},
                                              {none_x_y, any_split}, {3, 5}, {-1, 0, -1, -1}, 1, 1);
// [B, T, H, E] *_E [B, S, H, E]: batch dims in the middle.
constexpr family_spec heads_spec =
    make_spec(4, 4, {none_x, none_x_y, none_y, none_x_y}, {2, 3, 2, 3},
              {none_x, none_x_y, none_y, none_x_y}, {2, 3, 2, 3}, {0, -1, 2, -1}, 1, 3);
// [I, K, J] *_{J, K} [J, K, L] and [J, I, K] *_{J, K} [L, J, K].
constexpr family_spec reordered_spec =
    make_spec(3, 3, {none_x_y, none_x_y, none_x_y}, {3, 3, 3}, {none_x, none_y, none_x_y},
              {2, 2, 3}, {-1, -1, -1, -1}, 1, 4);
// [B, H, T, E] *_E [E, F].
constexpr family_spec linear_spec =
    make_spec(4, 2, {none_x, none_y, none_x_y, none_x_y}, {2, 2, 3, 3}, {none_x_y, none_x_y},
              {3, 3}, {-1, -1, -1, -1}, 1, 3);

template <class LhsDims, class RhsDims, class Expected, const family_spec& Spec, class... C>
struct family {
  using lhs_dims = LhsDims;
  using rhs_dims = RhsDims;
  using expected_dims = Expected;  // the result's dims by the test's own rule
  static constexpr const family_spec& spec = Spec;
  static constexpr auto legal = pairs_of<Spec, true>();
  static constexpr auto illegal = pairs_of<Spec, false>();
  template <class Lt, class Rt>
  static auto run(const Lt& a, const Rt& b) {
    return tpx::einsum<C...>(a, b);
  }
  template <class Lt, class Rt>
  static constexpr bool possible = tpx::can_einsum_v<Lt, Rt, C...>;
  template <class Lt, class Rt>
  using traits = tpx::einsum_traits<Lt, Rt, C...>;
  static std::vector<std::string> contracted() { return {C::name.c_str()...}; }
};

using scores =
    family<dims<B, H, T, E>, dims<B, H, S, E>, type_list<B<>, H<>, T<>, S<>>, scores_spec, E<>>;
using values =
    family<dims<B, H, T, S>, dims<B, H, S, E>, type_list<B<>, H<>, T<>, E<>>, attention_spec, S<>>;
using two = family<dims<I, J, K>, dims<J, K, L>, type_list<I<>, L<>>, two_spec, J<>, K<>>;
using shared = family<dims<I, J>, dims<J, I>, type_list<I<>>, shared_spec, J<>>;
using heads =
    family<dims<B, T, H, E>, dims<B, S, H, E>, type_list<B<>, H<>, T<>, S<>>, heads_spec, E<>>;
using order = family<dims<I, K, J>, dims<J, K, L>, type_list<I<>, L<>>, reordered_spec, J<>, K<>>;
using split = family<dims<J, I, K>, dims<L, J, K>, type_list<I<>, L<>>, reordered_spec, J<>, K<>>;
using linear =
    family<dims<B, H, T, E>, dims<E, F>, type_list<B<>, H<>, T<>, F<>>, linear_spec, E<>>;

// --- Operands and the naive reference ---

using extent_map = std::map<std::string, std::int64_t>;

template <class Dims>
std::vector<std::string> names_of() {
  return [&]<class... Ds>(type_list<Ds...>) {
    return std::vector<std::string>{Ds::name.c_str()...};
  }(Dims{});
}

template <class Tn>
typename Tn::extents_type extents_of(const extent_map& ext) {
  const auto names = names_of<typename Tn::dims>();
  typename Tn::extents_type e{};
  for (std::size_t d = 0; d < Tn::order; ++d) e[d] = ext.at(names[d]);
  return e;
}

// fn(local flat index, global flat index) over this rank's block.
template <class Tn, class Fn>
void for_each_local_nd(const Tn& t, Fn&& fn) {
  constexpr std::size_t n = Tn::order;
  if (t.size() == 0) return;
  std::array<std::int64_t, n> at{};
  for (std::size_t local = 0; local < t.size(); ++local) {
    std::int64_t global = 0;
    for (std::size_t d = 0; d < n; ++d)
      global = global * t.global_extent(d) + t.local_offset(d) + at[d];
    fn(local, global);
    for (std::size_t d = n; d-- > 0;) {
      if (++at[d] < t.local_extent(d)) break;
      at[d] = 0;
    }
  }
}

template <class Tn, class R>
Tn make_nd(const R& rank, const extent_map& ext, int which) {
  Tn t(rank, typename Tn::shape_type(extents_of<Tn>(ext)));
  const float share = share_of<Tn>(rank);
  for_each_local_nd(t, [&](std::size_t local, std::int64_t global) {
    t.local()[local] = share * value_at(which, global);
  });
  return t;
}

// The contraction by its definition: for every result index, the sum over the contracted
// indices of lhs * rhs, the operands indexed by dim name. Also sum |lhs * rhs| (the scale).
struct reference {
  std::vector<double> want, scale;
};
reference naive(const std::vector<std::string>& lhs, const std::vector<std::string>& rhs,
                const std::vector<std::string>& contracted, const std::vector<std::string>& result,
                const extent_map& ext) {
  std::vector<std::string> slots = result;  // the loop indices: result dims, then contracted
  slots.insert(slots.end(), contracted.begin(), contracted.end());
  auto slot_of = [&](const std::string& name) {
    for (std::size_t s = 0; s < slots.size(); ++s)
      if (slots[s] == name) return s;
    throw std::logic_error("test: dim " + name + " has no loop index");
  };
  std::vector<std::size_t> ls, rs;
  for (const auto& d : lhs) ls.push_back(slot_of(d));
  for (const auto& d : rhs) rs.push_back(slot_of(d));
  std::int64_t n_result = 1, n_sum = 1;
  for (const auto& d : result) n_result *= ext.at(d);
  for (const auto& d : contracted) n_sum *= ext.at(d);
  reference ref{std::vector<double>(n_result), std::vector<double>(n_result)};
  std::vector<std::int64_t> at(slots.size());
  auto flat = [&](const std::vector<std::string>& names, const std::vector<std::size_t>& s) {
    std::int64_t f = 0;
    for (std::size_t d = 0; d < names.size(); ++d) f = f * ext.at(names[d]) + at[s[d]];
    return f;
  };
  // at[s] = the digit of index `flat` over `names` (row-major) that belongs to slot first + s.
  auto unflatten = [&](std::int64_t index, const std::vector<std::string>& names,
                       std::size_t first) {
    for (std::size_t d = names.size(); d-- > 0;) {
      at[first + d] = index % ext.at(names[d]);
      index /= ext.at(names[d]);
    }
  };
  for (std::int64_t r = 0; r < n_result; ++r) {
    unflatten(r, result, 0);
    for (std::int64_t c = 0; c < n_sum; ++c) {
      unflatten(c, contracted, result.size());
      const double x = double(value_at(1, flat(lhs, ls))) * double(value_at(2, flat(rhs, rs)));
      ref.want[r] += x;
      ref.scale[r] += std::abs(x);
    }
  }
  return ref;
}

// The test's rule for the result's dims: the left's dims without the contracted ones, then the
// right's dims that the left does not have.
std::vector<std::string> expected_result(const std::vector<std::string>& lhs,
                                         const std::vector<std::string>& rhs,
                                         const std::vector<std::string>& contracted) {
  auto has = [](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  std::vector<std::string> batch, lfree, out;
  for (const auto& d : lhs)
    if (!has(contracted, d)) (has(rhs, d) ? batch : lfree).push_back(d);
  out = batch;
  out.insert(out.end(), lfree.begin(), lfree.end());
  for (const auto& d : rhs)
    if (!has(contracted, d) && !has(lhs, d)) out.push_back(d);
  return out;
}

// --- The checks ---

template <class Fam, pair_code P, class R>
void check_pair(const R& rank, const extent_map& ext, tally& t) {
  using TA = typename Fam::lhs_dims::template tensor<P, true>;
  using TB = typename Fam::rhs_dims::template tensor<P, false>;
  static_assert(Fam::template possible<TA, TB>, "a legal pair is rejected");
  const auto a = make_nd<TA>(rank, ext, 1);
  const auto b = make_nd<TB>(rank, ext, 2);
  const auto c = Fam::run(a, b);
  using C = std::remove_cvref_t<decltype(c)>;
  static_assert(std::is_same_v<typename tpx::remove_all_axes<typename C::dims>::type,
                               typename Fam::expected_dims>,
                "the result's dims are not [batch, left free, right free]");
  const auto reduced = tpx::reshard<tpx::tensor_with_t<C, typename C::dims, Unreduced<>>>(c);
  const auto lhs = names_of<typename TA::dims>(), rhs = names_of<typename TB::dims>();
  const auto result = expected_result(lhs, rhs, Fam::contracted());
  const reference ref = naive(lhs, rhs, Fam::contracted(), result, ext);
  bool ok = names_of<typename C::dims>() == result;
  for_each_local_nd(reduced, [&](std::size_t local, std::int64_t global) {
    const double got = reduced.local()[local];
    if (!(std::abs(got - ref.want[global]) <= 1e-5 * ref.scale[global] + 1e-12)) ok = false;
  });
  if (!ok) {
    std::string sizes;
    for (const auto& [name, e] : ext) sizes += name + "=" + std::to_string(e) + " ";
    t.fail(std::string(TA::notation.c_str()) + " * " + TB::notation.c_str() + " (" +
           Fam::template traits<TA, TB>::description.c_str() + ") on rank " +
           std::to_string(rank.world_rank()) + " of mesh " + rank.mesh_string() + ", extents " +
           sizes);
  }
  if (rank.world_rank() == 0) ++t.checked;
}

}  // namespace

namespace {

// Every legal pair of family Fam whose index (offset by `salt`) falls in this part, run; every
// illegal one, asserted rejected.
template <class Fam, int Salt, class R, std::size_t... Is, std::size_t... Js>
void check_family(std::index_sequence<Is...>, std::index_sequence<Js...>, const R& rank,
                  const extent_map& ext, tally& t) {
  (
      [&] {
        if constexpr ((Is + Salt) % parts == part) check_pair<Fam, Fam::legal[Is]>(rank, ext, t);
      }(),
      ...);
  (
      [] {
        if constexpr ((Js + Salt) % parts == part) {
          constexpr pair_code p = Fam::illegal[Js];
          using TA = typename Fam::lhs_dims::template tensor<p, true>;
          using TB = typename Fam::rhs_dims::template tensor<p, false>;
          static_assert(!Fam::template possible<TA, TB>, "an illegal pair is accepted");
        }
      }(),
      ...);
}

template <class Fam, int Salt, class R>
void check_family(const R& rank, const extent_map& ext, tally& t) {
  check_family<Fam, Salt>(std::make_index_sequence<Fam::legal.size()>{},
                          std::make_index_sequence<Fam::illegal.size()>{}, rank, ext, t);
}

// For two matrices sharing one dim, einsum plans what matmul plans.
template <class CaseA, class CaseB>
constexpr bool same_plan() {
  using TA = typename CaseA::tensor;
  using TB = typename CaseB::tensor;
  using m = tpx::matmul_traits<TA, TB, J<>>;
  using e = tpx::einsum_traits<TA, TB, J<>>;
  if constexpr (!m::possible) {
    return !e::possible;
  } else {
    return e::possible && std::is_same_v<typename m::lhs_steps, typename e::lhs_steps> &&
           std::is_same_v<typename m::rhs_steps, typename e::rhs_steps> &&
           std::is_same_v<typename m::result, typename e::result> &&
           m::description == e::description;
  }
}
template <class CaseA, class Rhs>
struct row_same;
template <class CaseA, class... Bs>
struct row_same<CaseA, type_list<Bs...>> {
  static constexpr bool value = (same_plan<CaseA, Bs>() && ...);
};
template <class Lhs, class Rhs, std::size_t... Row>
constexpr bool same_plans(std::index_sequence<Row...>) {
  return (std::conditional_t<Row % parts == part, row_same<tpx::type_at_t<Row, Lhs>, Rhs>,
                             std::true_type>::value &&
          ...);
}
static_assert(same_plans<valid_cases<I, J>, valid_cases<J, K>>(std::make_index_sequence<18>{}),
              "einsum's plan of a matrix product differs from matmul's");

// contract<J> of [I, J] x [J, I], which the two-dim planner rejects ("the result would hold I
// twice"), is the batched product over I; two matrices sharing only J stay matmul's.
template <class A, class Bt>
using contract_j = decltype(tpx::contract<J>(std::declval<const A&>(), std::declval<const Bt&>()));
static_assert(
    std::is_same_v<contract_j<tpx::Tensor<float, I<X>, J<Y>>, tpx::Tensor<float, J<>, I<X>>>,
                   tpx::Tensor<float, I<X>>>);
static_assert(
    std::is_same_v<contract_j<tpx::Tensor<float, I<X>, J<Y>>, tpx::Tensor<float, J<Y>, K<>>>,
                   tpx::Tensor<float, I<X>, K<>, Unreduced<Y>>>);

}  // namespace

TEST_CASE("batched contractions equal the naive loop for every generated pair of shardings") {
  tally t;
  const extent_map even{{"B", 2}, {"H", 6}, {"T", 4}, {"S", 6}, {"E", 6},
                        {"F", 6}, {"I", 6}, {"J", 4}, {"K", 6}, {"L", 6}};
  const extent_map uneven{{"B", 3}, {"H", 5}, {"T", 7}, {"S", 4}, {"E", 5},
                          {"F", 2}, {"I", 5}, {"J", 7}, {"K", 3}, {"L", 1}};
  for (auto [x, y] : {std::pair{1, 1}, std::pair{2, 2}, std::pair{2, 3}})
    for (const extent_map* ext : {&even, &uneven})
      tpx::spmd(tpx::host, tpx::Mesh<X, Y>{x, y}, [&](auto& rank) {
        check_family<scores, 0>(rank, *ext, t);
        check_family<values, 1>(rank, *ext, t);
        check_family<two, 2>(rank, *ext, t);
        check_family<shared, 3>(rank, *ext, t);
        check_family<heads, 4>(rank, *ext, t);
        check_family<order, 5>(rank, *ext, t);
        check_family<split, 6>(rank, *ext, t);
        check_family<linear, 7>(rank, *ext, t);
      });
  for (const std::string& f : t.failures) FAIL_CHECK(f);
  CHECK(t.failures.empty());
  CHECK(t.checked > 0);
  MESSAGE("part " << part << "/" << parts << ": " << t.checked.load()
                  << " legal (sharding pair, mesh, extents) cases checked numerically");
}

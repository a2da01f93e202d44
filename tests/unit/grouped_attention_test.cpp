// Grouped-query attention (tpx::nn::query_groups, nn/attention.hpp's top): the reference layer and
// the fused one (nn/fused_attention.hpp, on the host loops that are the CUDA kernels' twin) with
// G query heads per key head, against an independent reference: the forward as a naive loop in
// double in which query head (h, g) reads key head h, and the gradients as central finite
// differences of that loop (so the sums of dk and dv over a key head's queries are checked, not
// restated). Layouts: the projections' [B, T, H, G, E] against k and v [B, S, H, E] (read in place
// by the fused layer), and heads first with G after T ([B, H, T, G, E]) or before it
// ([B, H, G, T, E]). Shardings: batch over X and key heads over Y on meshes 1x1 to 3x2 (an empty
// block of the batch on 3x2); the group dim over Y with the key heads whole (more tensor-parallel
// ranks than key heads), leaving dk and dv partial sums over Y, on 1x2, 2x2 and 1x4 (an empty
// block of G); context parallelism, queries in blocks over X against every key, dk and dv
// partial sums over X. And a sequence of several tiles of keys (T = 70), whole and in blocks
// that start inside a tile, fused layer against the reference layer; and the ungrouped layers on
// one sequence without batch or head dims, q [T, E].
// Tolerances, as attention_test.cpp's: fp32 against double, 2e-5 for outputs (of magnitude ~1) and
// 1e-4 for gradients (the finite differences are exact to ~1e-8); fused against the reference
// layer in fp32, 2e-5 + 1e-5 |want|.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <tpx/nn/attention.hpp>
#include <tpx/nn/fused_attention.hpp>
#include <tpx/tpx.hpp>
#include <type_traits>
#include <utility>
#include <vector>

#include "../support/finite_differences.hpp"

namespace {

using tpx::testing::as_float;
using tpx::testing::check_close;
using tpx::testing::normal_values;

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, T, S, H, G, E);

using tpx::nn::query_groups;

struct extents {
  std::int64_t b, t, h, g, e;
  std::int64_t queries() const { return b * t * h * g * e; }  // [B, T, H, G, E]
  std::int64_t keys() const { return b * t * h * e; }         // [B, S, H, E]
};
const extents small{2, 5, 2, 3, 4};

// out[b, t, h, g, :] = sum over s <= t of softmax_s(q[b, t, h, g].k[b, s, h] / sqrt(E)) v[b, s, h].
std::vector<double> grouped_attention(const extents& n, const std::vector<double>& q,
                                      const std::vector<double>& k, const std::vector<double>& v) {
  std::vector<double> out(q.size(), 0.0);
  const double scale = 1.0 / std::sqrt(double(n.e));
  const auto query = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t g) {
    return (((b * n.t + t) * n.h + h) * n.g + g) * n.e;
  };
  const auto key = [&](std::int64_t b, std::int64_t s, std::int64_t h) {
    return ((b * n.t + s) * n.h + h) * n.e;
  };
  for (std::int64_t b = 0; b < n.b; ++b)
    for (std::int64_t t = 0; t < n.t; ++t)
      for (std::int64_t h = 0; h < n.h; ++h)
        for (std::int64_t g = 0; g < n.g; ++g) {
          std::vector<double> w(static_cast<std::size_t>(t + 1));
          double m = -INFINITY, l = 0;
          for (std::int64_t s = 0; s <= t; ++s) {
            double dot = 0;
            for (std::int64_t e = 0; e < n.e; ++e)
              dot += q[query(b, t, h, g) + e] * k[key(b, s, h) + e];
            w[s] = dot * scale;
            m = std::max(m, w[s]);
          }
          for (auto& x : w) l += (x = std::exp(x - m));
          for (std::int64_t s = 0; s <= t; ++s)
            for (std::int64_t e = 0; e < n.e; ++e)
              out[query(b, t, h, g) + e] += w[s] / l * v[key(b, s, h) + e];
        }
  return out;
}

const tpx::testing::differentiated_attention& ref() {
  static const auto r = tpx::testing::differentiate_attention(
      [](const auto& q, const auto& k, const auto& v) { return grouped_attention(small, q, k, v); },
      normal_values(small.queries(), 11), normal_values(small.keys(), 12),
      normal_values(small.keys(), 13), normal_values(small.queries(), 14));
  return r;
}

// A run's results in the reference's layouts (out and dq [B, T, H, G, E], dk and dv [B, S, H, E],
// reduced) against it: 2e-5 for the output, 1e-4 for the gradients.
template <class Out, class Dq, class Dk, class Dv>
void check_against_reference(const Out& out, const Dq& dq, const Dk& dk, const Dv& dv) {
  const auto& r = ref();
  check_close(tpx::to_global(tpx::permute<B, T, H, G, E>(out)), r.out, 2e-5, "out");
  check_close(tpx::to_global(tpx::permute<B, T, H, G, E>(dq)), r.dq, 1e-4, "dq");
  check_close(tpx::to_global(tpx::permute<B, S, H, E>(dk)), r.dk, 1e-4, "dk");
  check_close(tpx::to_global(tpx::permute<B, S, H, E>(dv)), r.dv, 1e-4, "dv");
}

// x [B, T, H, G, E] (q, dout) or [B, S, H, E] (k, v) of n, split as Spec says.
template <class... Spec, class Rank>
auto queries_of(Rank& rank, const extents& n, const std::vector<double>& x) {
  return tpx::from_global<float, Spec...>(rank, {B(n.b), T(n.t), H(n.h), G(n.g), E(n.e)},
                                          as_float(x));
}
template <class... Spec, class Rank>
auto keys_of(Rank& rank, const extents& n, const std::vector<double>& x) {
  return tpx::from_global<float, Spec...>(rank, {B(n.b), S(n.t), H(n.h), E(n.e)}, as_float(x));
}

template <class Tn>
using plain_t = std::remove_cvref_t<Tn>;

}  // namespace

TEST_CASE("grouped-query attention on the projection layout equals the double reference") {
  const auto& r = ref();
  for (const auto& [mx_, my_] :
       std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {1, 2}, {2, 2}, {3, 2}}) {
    const int mx = mx_, my = my_;  // clang before 16 cannot capture bindings in lambdas
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      const auto q = queries_of<B<X>, T<>, H<Y>, G<>, E<>>(rank, small, r.q);
      const auto k = keys_of<B<X>, S<>, H<Y>, E<>>(rank, small, r.k);
      const auto v = keys_of<B<X>, S<>, H<Y>, E<>>(rank, small, r.v);
      const auto dout = queries_of<B<X>, T<>, H<Y>, G<>, E<>>(rank, small, r.dout);
      using groups = query_groups<G>;
      // The reference layer answers in einsum's layout, batch dims first.
      const auto fwd = tpx::nn::causal_attention_forward<groups>(q, k, v);
      const auto heads_first_dout = tpx::permute<B, H, T, G, E>(dout);
      const auto grad =
          tpx::nn::causal_attention_backward<groups>(q, k, v, fwd.probs, heads_first_dout);
      using Heads = tpx::Tensor<float, B<X>, H<Y>, T<>, G<>, E<>>;
      using KeyHeads = tpx::Tensor<float, B<X>, H<Y>, S<>, E<>>;
      static_assert(std::is_same_v<plain_t<decltype(fwd.out)>, Heads>);
      static_assert(std::is_same_v<plain_t<decltype(fwd.probs)>,
                                   tpx::Tensor<float, B<X>, H<Y>, T<>, G<>, S<>>>);
      static_assert(std::is_same_v<plain_t<decltype(grad.dq)>, Heads>);
      static_assert(std::is_same_v<plain_t<decltype(grad.dk)>, KeyHeads>);
      static_assert(std::is_same_v<plain_t<decltype(grad.dv)>, KeyHeads>);
      check_against_reference(fwd.out, grad.dq, grad.dk, grad.dv);
      // The fused layer reads the layout in place and answers in it.
      const auto fused = tpx::nn::fused_causal_attention_forward<groups>(q, k, v);
      const auto fused_grad =
          tpx::nn::fused_causal_attention_backward<groups>(q, k, v, fused.out, fused.lse, dout);
      static_assert(std::is_same_v<plain_t<decltype(fused.out)>, plain_t<decltype(q)>>);
      static_assert(
          std::is_same_v<plain_t<decltype(fused.lse)>, tpx::Tensor<float, B<X>, T<>, H<Y>, G<>>>);
      static_assert(std::is_same_v<plain_t<decltype(fused_grad.dk)>, plain_t<decltype(k)>>);
      static_assert(std::is_same_v<plain_t<decltype(fused_grad.dv)>, plain_t<decltype(k)>>);
      check_against_reference(fused.out, fused_grad.dq, fused_grad.dk, fused_grad.dv);
    });
  }
}

// Heads first, with G after T or before it: the sequence is the dim the layer is not told is the
// group, whichever stands where.
template <template <class...> class Second, template <class...> class Third>
void check_heads_first() {
  const auto& r = ref();
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    const auto q = tpx::permute<B, H, Second, Third, E>(
        queries_of<B<X>, T<>, H<Y>, G<>, E<>>(rank, small, r.q));
    const auto k = tpx::permute<B, H, S, E>(keys_of<B<X>, S<>, H<Y>, E<>>(rank, small, r.k));
    const auto v = tpx::permute<B, H, S, E>(keys_of<B<X>, S<>, H<Y>, E<>>(rank, small, r.v));
    const auto dout = tpx::permute<B, H, Second, Third, E>(
        queries_of<B<X>, T<>, H<Y>, G<>, E<>>(rank, small, r.dout));
    using groups = query_groups<G>;
    const auto fwd = tpx::nn::causal_attention_forward<groups>(q, k, v);
    const auto grad = tpx::nn::causal_attention_backward<groups>(q, k, v, fwd.probs, dout);
    check_against_reference(fwd.out, grad.dq, grad.dk, grad.dv);
    const auto fused = tpx::nn::fused_causal_attention_forward<groups>(q, k, v);
    const auto fused_grad =
        tpx::nn::fused_causal_attention_backward<groups>(q, k, v, fused.out, fused.lse, dout);
    check_against_reference(fused.out, fused_grad.dq, fused_grad.dk, fused_grad.dv);
  });
}

TEST_CASE("grouped-query attention heads first, G after T, equals the double reference") {
  check_heads_first<T, G>();
}

TEST_CASE("grouped-query attention heads first, G before T, equals the double reference") {
  check_heads_first<G, T>();
}

TEST_CASE("the group dim split over Y leaves dk and dv partial sums over Y, reduced equal") {
  const auto& r = ref();
  for (const auto& [mx_, my_] : std::vector<std::pair<int, int>>{{1, 2}, {2, 2}, {1, 4}}) {
    const int mx = mx_, my = my_;
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      // Each key head whole on every rank of Y, its G = 3 query heads split over them (on 1x4 a
      // rank holds none).
      const auto q = queries_of<B<X>, T<>, H<>, G<Y>, E<>>(rank, small, r.q);
      const auto k = keys_of<B<X>, S<>, H<>, E<>>(rank, small, r.k);
      const auto v = keys_of<B<X>, S<>, H<>, E<>>(rank, small, r.v);
      const auto dout = queries_of<B<X>, T<>, H<>, G<Y>, E<>>(rank, small, r.dout);
      using groups = query_groups<G>;
      const auto fwd = tpx::nn::causal_attention_forward<groups>(q, k, v);
      const auto grad = tpx::nn::causal_attention_backward<groups>(
          q, k, v, fwd.probs, tpx::permute<B, H, T, G, E>(dout));
      using PartialKeys = tpx::Tensor<float, B<X>, H<>, S<>, E<>, tpx::Unreduced<Y>>;
      static_assert(std::is_same_v<plain_t<decltype(grad.dk)>, PartialKeys>);
      static_assert(std::is_same_v<plain_t<decltype(grad.dv)>, PartialKeys>);
      check_against_reference(fwd.out, grad.dq, tpx::all_reduce<Y>(grad.dk),
                              tpx::all_reduce<Y>(grad.dv));
      const auto fused = tpx::nn::fused_causal_attention_forward<groups>(q, k, v);
      const auto fused_grad =
          tpx::nn::fused_causal_attention_backward<groups>(q, k, v, fused.out, fused.lse, dout);
      using FusedPartialKeys = tpx::Tensor<float, B<X>, S<>, H<>, E<>, tpx::Unreduced<Y>>;
      static_assert(std::is_same_v<plain_t<decltype(fused_grad.dk)>, FusedPartialKeys>);
      check_against_reference(fused.out, fused_grad.dq, tpx::all_reduce<Y>(fused_grad.dk),
                              tpx::all_reduce<Y>(fused_grad.dv));
    });
  }
}

TEST_CASE("grouped-query attention with blocks of queries over X equals the double reference") {
  const auto& r = ref();
  for (const int mx : {2, 3}) {  // blocks of 3 and 2, or 2, 2 and 1 positions
    CAPTURE(mx);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, 2}, [&](auto& rank) {
      const auto q = queries_of<B<>, T<X>, H<Y>, G<>, E<>>(rank, small, r.q);
      const auto k = keys_of<B<>, S<>, H<Y>, E<>>(rank, small, r.k);
      const auto v = keys_of<B<>, S<>, H<Y>, E<>>(rank, small, r.v);
      const auto dout = queries_of<B<>, T<X>, H<Y>, G<>, E<>>(rank, small, r.dout);
      using groups = query_groups<G>;
      const auto fwd = tpx::nn::causal_attention_forward<groups>(q, k, v);
      const auto grad = tpx::nn::causal_attention_backward<groups>(
          q, k, v, fwd.probs, tpx::permute<B, H, T, G, E>(dout));
      check_against_reference(fwd.out, grad.dq, tpx::all_reduce<X>(grad.dk),
                              tpx::all_reduce<X>(grad.dv));
      const auto fused = tpx::nn::fused_causal_attention_forward<groups>(q, k, v);
      const auto fused_grad =
          tpx::nn::fused_causal_attention_backward<groups>(q, k, v, fused.out, fused.lse, dout);
      check_against_reference(fused.out, fused_grad.dq, tpx::all_reduce<X>(fused_grad.dk),
                              tpx::all_reduce<X>(fused_grad.dv));
    });
  }
}

TEST_CASE("fused grouped-query attention over several tiles of keys equals the reference layer") {
  const extents n{1, 70, 2, 2, 8};  // three tiles of keys, the last partial
  const auto q = normal_values(n.queries(), 21), k = normal_values(n.keys(), 22),
             v = normal_values(n.keys(), 23), dout = normal_values(n.queries(), 24);
  for (const int mx : {1, 3}) {  // whole, and blocks of 24, 23 and 23 queries
    CAPTURE(mx);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, 2}, [&](auto& rank) {
      const auto qt = queries_of<B<>, T<X>, H<Y>, G<>, E<>>(rank, n, q);
      const auto kt = keys_of<B<>, S<>, H<Y>, E<>>(rank, n, k);
      const auto vt = keys_of<B<>, S<>, H<Y>, E<>>(rank, n, v);
      const auto dt = queries_of<B<>, T<X>, H<Y>, G<>, E<>>(rank, n, dout);
      using groups = query_groups<G>;
      const auto fwd = tpx::nn::causal_attention_forward<groups>(qt, kt, vt);
      const auto grad = tpx::nn::causal_attention_backward<groups>(qt, kt, vt, fwd.probs,
                                                                   tpx::permute<B, H, T, G, E>(dt));
      const auto fused = tpx::nn::fused_causal_attention_forward<groups>(qt, kt, vt);
      const auto fused_grad =
          tpx::nn::fused_causal_attention_backward<groups>(qt, kt, vt, fused.out, fused.lse, dt);
      const auto as_double = [](const std::vector<float>& x) {
        return std::vector<double>(x.begin(), x.end());
      };
      const auto want = [&](const auto& x) { return as_double(tpx::to_global(x)); };
      check_close(tpx::to_global(fused.out), want(tpx::permute<B, T, H, G, E>(fwd.out)), 2e-5,
                  "out", 1e-5);
      check_close(tpx::to_global(fused_grad.dq), want(tpx::permute<B, T, H, G, E>(grad.dq)), 2e-5,
                  "dq", 1e-5);
      check_close(tpx::to_global(tpx::all_reduce<X>(fused_grad.dk)),
                  want(tpx::permute<B, S, H, E>(tpx::all_reduce<X>(grad.dk))), 2e-5, "dk", 1e-5);
      check_close(tpx::to_global(tpx::all_reduce<X>(fused_grad.dv)),
                  want(tpx::permute<B, S, H, E>(tpx::all_reduce<X>(grad.dv))), 2e-5, "dv", 1e-5);
    });
  }
}

TEST_CASE("attention of one sequence without batch or head dims, q [T, E], equals the reference") {
  // The ungrouped layers on the smallest operands: T and E alone (B = H = G = 1 in the reference).
  const extents one{1, 5, 1, 1, 4};
  const auto r = tpx::testing::differentiate_attention(
      [&](const auto& q, const auto& k, const auto& v) { return grouped_attention(one, q, k, v); },
      normal_values(one.queries(), 31), normal_values(one.keys(), 32),
      normal_values(one.keys(), 33), normal_values(one.queries(), 34));
  tpx::spmd(tpx::host, tpx::Mesh<X>{1}, [&](auto& rank) {
    const auto qt = tpx::from_global<float, T<>, E<>>(rank, {T(one.t), E(one.e)}, as_float(r.q));
    const auto kt = tpx::from_global<float, S<>, E<>>(rank, {S(one.t), E(one.e)}, as_float(r.k));
    const auto vt = tpx::from_global<float, S<>, E<>>(rank, {S(one.t), E(one.e)}, as_float(r.v));
    const auto dt = tpx::from_global<float, T<>, E<>>(rank, {T(one.t), E(one.e)}, as_float(r.dout));
    const auto fwd = tpx::nn::causal_attention_forward(qt, kt, vt);
    const auto grad = tpx::nn::causal_attention_backward(qt, kt, vt, fwd.probs, dt);
    const auto fused = tpx::nn::fused_causal_attention_forward(qt, kt, vt);
    const auto fused_grad =
        tpx::nn::fused_causal_attention_backward(qt, kt, vt, fused.out, fused.lse, dt);
    for (const auto* out : {&fwd.out, &fused.out})
      check_close(tpx::to_global(*out), r.out, 2e-5, "out");
    check_close(tpx::to_global(grad.dq), r.dq, 1e-4, "dq");
    check_close(tpx::to_global(grad.dk), r.dk, 1e-4, "dk");
    check_close(tpx::to_global(grad.dv), r.dv, 1e-4, "dv");
    check_close(tpx::to_global(fused_grad.dq), r.dq, 1e-4, "fused dq");
    check_close(tpx::to_global(fused_grad.dk), r.dk, 1e-4, "fused dk");
    check_close(tpx::to_global(fused_grad.dv), r.dv, 1e-4, "fused dv");
  });
}

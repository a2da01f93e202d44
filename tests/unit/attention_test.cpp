// Causal attention on sharded tensors, the reference layer (tpx/nn/attention.hpp) and the fused
// one (tpx/nn/fused_attention.hpp, on the host loops that are the CUDA kernels' twin), against an
// independent reference: the forward as naive loops over the whole tensors in double, and the
// gradients as central finite differences of that double forward (so the backward's formulas are
// checked, not restated). Batch and heads split over X and Y in several ways, on meshes 1x1, 2x1,
// 1x2, 2x2 and 3x2, with extents that do not divide (uneven and empty blocks), in the
// heads-first layout [B, H, T, E] and in a projection's [B, T, H, E] (which the fused layer
// reads in place and answers in). Context parallelism (blocks of queries over X, or over X and
// Y, keys gathered) for both layers, an empty block among them. Sequences longer than the
// fused kernels' tile (T = 70: three tiles of keys, the last partial) against the reference
// layer, at E = 6 and at the largest E, 128, whole and in blocks of queries that start inside a
// tile. The host's softmax a row at a time against the
// grid passes a space without it runs (the GPU's, and the host stand-ins for it): the same bits,
// fp32 and bf16, down to terms that underflow.
// Tolerances: fp32 against double, |got - want| <= 2e-5 (outputs, of magnitude ~1) and 1e-4
// (gradients; the finite differences themselves are exact to ~1e-8); fused against reference
// layer in fp32, 2e-5 + 1e-5 |want|; fused bf16 against fp32, 2e-2 + 2e-2 |want| (bf16 keeps
// 8 bits).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tpx/nn/attention.hpp>
#include <tpx/nn/fused_attention.hpp>
#include <tpx/tensor/staging.hpp>
#include <tpx/tpx.hpp>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../support/counting_space.hpp"
#include "../support/finite_differences.hpp"
#include "../support/recording_space.hpp"

namespace {

using tpx::testing::as_float;
using tpx::testing::check_close;
using tpx::testing::normal_values;

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, H, T, S, E);

const std::int64_t nb = 3, nh = 4, nt = 5, ne = 6;

// out[b, h, t, :] = sum over s <= t of softmax_s(q.k / sqrt(E)) v[b, h, s, :], in double.
std::vector<double> attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v) {
  std::vector<double> out(q.size(), 0.0);
  const double scale = 1.0 / std::sqrt(double(ne));
  for (std::int64_t bh = 0; bh < nb * nh; ++bh)
    for (std::int64_t t = 0; t < nt; ++t) {
      std::vector<double> w(static_cast<std::size_t>(t + 1));
      double m = -INFINITY, l = 0;
      for (std::int64_t s = 0; s <= t; ++s) {
        double dot = 0;
        for (std::int64_t e = 0; e < ne; ++e)
          dot += q[(bh * nt + t) * ne + e] * k[(bh * nt + s) * ne + e];
        w[s] = dot * scale;
        m = std::max(m, w[s]);
      }
      for (auto& x : w) l += (x = std::exp(x - m));
      for (std::int64_t s = 0; s <= t; ++s)
        for (std::int64_t e = 0; e < ne; ++e)
          out[(bh * nt + t) * ne + e] += w[s] / l * v[(bh * nt + s) * ne + e];
    }
  return out;
}

const tpx::testing::differentiated_attention& ref() {
  const std::int64_t n = nb * nh * nt * ne;
  static const auto r = tpx::testing::differentiate_attention(
      attention_reference, normal_values(n, 1), normal_values(n, 2), normal_values(n, 3),
      normal_values(n, 4));
  return r;
}

// The output and the three gradients of a run, gathered ([B, H, T, E]).
struct attention_results {
  std::vector<float> out, dq, dk, dv;
};

// A run's results against the reference: 2e-5 for the output, 1e-4 for the gradients (see the
// top of the file).
void check_against_reference(const attention_results& got) {
  const auto& r = ref();
  check_close(got.out, r.out, 2e-5, "out");
  check_close(got.dq, r.dq, 1e-4, "dq");
  check_close(got.dk, r.dk, 1e-4, "dk");
  check_close(got.dv, r.dv, 1e-4, "dv");
}
template <class Forward, class Gradients>
void check_against_reference(const Forward& fwd, const Gradients& grad) {
  check_against_reference({tpx::to_global(fwd.out), tpx::to_global(grad.dq),
                           tpx::to_global(grad.dk), tpx::to_global(grad.dv)});
}

// One layout: batch split as Bs, heads as Hs, on every mesh.
template <class Bs, class Hs>
void check_layout() {
  const auto& r = ref();
  const std::vector<std::pair<int, int>> meshes = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {3, 2}};
  for (const auto& [mx_, my_] : meshes) {
    const int mx = mx_, my = my_;  // clang before 16 cannot capture bindings in lambdas
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      using Qt = tpx::Tensor<float, Bs, Hs, T<>, E<>>;
      using Kt = tpx::Tensor<float, Bs, Hs, S<>, E<>>;
      const auto q = tpx::from_global<float, Bs, Hs, T<>, E<>>(rank, {B(nb), H(nh), T(nt), E(ne)},
                                                               as_float(r.q));
      const auto k = tpx::from_global<float, Bs, Hs, S<>, E<>>(rank, {B(nb), H(nh), S(nt), E(ne)},
                                                               as_float(r.k));
      const auto v = tpx::from_global<float, Bs, Hs, S<>, E<>>(rank, {B(nb), H(nh), S(nt), E(ne)},
                                                               as_float(r.v));
      const auto dout = tpx::from_global<float, Bs, Hs, T<>, E<>>(
          rank, {B(nb), H(nh), T(nt), E(ne)}, as_float(r.dout));
      const auto fwd = tpx::nn::causal_attention_forward(q, k, v);
      const auto grad = tpx::nn::causal_attention_backward(q, k, v, fwd.probs, dout);
      // No communication changes a split: the results are split as the operands are.
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(fwd.out)>, Qt>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(fwd.probs)>,
                                   tpx::Tensor<float, Bs, Hs, T<>, S<>>>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dq)>, Qt>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dk)>, Kt>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dv)>, Kt>);
      check_against_reference(fwd, grad);
      const auto fused = tpx::nn::fused_causal_attention_forward(q, k, v);
      const auto fused_grad =
          tpx::nn::fused_causal_attention_backward(q, k, v, fused.out, fused.lse, dout);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(fused.out)>, Qt>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(fused.lse)>,
                                   tpx::Tensor<float, Bs, Hs, T<>>>);
      static_assert(std::is_same_v<decltype(fused_grad), decltype(grad)>);
      check_against_reference(fused, fused_grad);
    });
  }
}

// [B, H, P, E] -> [B, P, H, E]: the layout a projection x[B, T, D] *_D W[D, H, E] gives.
std::vector<double> sequence_major(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t h = 0; h < nh; ++h)
      for (std::int64_t p = 0; p < nt; ++p)
        for (std::int64_t e = 0; e < ne; ++e)
          out[((b * nt + p) * nh + h) * ne + e] = v[((b * nh + h) * nt + p) * ne + e];
  return out;
}

// A reference array ([B, H, T, E]) as a projection gives it, [B_X, T, H_Y, E]; keys along S.
template <class Rank>
auto as_projection(Rank& rank, const std::vector<double>& x) {
  return tpx::from_global<float, B<X>, T<>, H<Y>, E<>>(rank, {B(nb), T(nt), H(nh), E(ne)},
                                                       as_float(sequence_major(x)));
}
template <class Rank>
auto as_key_projection(Rank& rank, const std::vector<double>& x) {
  return tpx::rename<T, S>(as_projection(rank, x));
}

}  // namespace

TEST_CASE("causal attention on the projection layout [B, T, H, E] gives heads-first results") {
  const auto& r = ref();
  for (const auto& [mx_, my_] : std::vector<std::pair<int, int>>{{1, 1}, {2, 2}, {3, 2}}) {
    const int mx = mx_, my = my_;
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      const auto q = as_projection(rank, r.q);
      const auto k = as_key_projection(rank, r.k);
      const auto v = as_key_projection(rank, r.v);
      const auto dout = tpx::from_global<float, B<X>, H<Y>, T<>, E<>>(
          rank, {B(nb), H(nh), T(nt), E(ne)}, as_float(r.dout));
      const auto fwd = tpx::nn::causal_attention_forward(q, k, v);
      const auto grad = tpx::nn::causal_attention_backward(q, k, v, fwd.probs, dout);
      using Heads = tpx::Tensor<float, B<X>, H<Y>, T<>, E<>>;
      using KeyHeads = tpx::Tensor<float, B<X>, H<Y>, S<>, E<>>;
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(fwd.out)>, Heads>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dq)>, Heads>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dk)>, KeyHeads>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dv)>, KeyHeads>);
      check_against_reference(fwd, grad);
    });
  }
}

TEST_CASE("fused attention reads the projection layout [B, T, H, E] in place, results alike") {
  const auto& r = ref();
  for (const auto& [mx_, my_] : std::vector<std::pair<int, int>>{{1, 1}, {2, 2}, {3, 2}, {1, 2}}) {
    const int mx = mx_, my = my_;
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      using Tokens = tpx::Tensor<float, B<X>, T<>, H<Y>, E<>>;
      using KeyTokens = tpx::Tensor<float, B<X>, S<>, H<Y>, E<>>;
      const auto q = as_projection(rank, r.q);
      const auto k = as_key_projection(rank, r.k);
      const auto v = as_key_projection(rank, r.v);
      const auto dout = as_projection(rank, r.dout);
      const auto fused = tpx::nn::fused_causal_attention_forward(q, k, v);
      const auto grad =
          tpx::nn::fused_causal_attention_backward(q, k, v, fused.out, fused.lse, dout);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(fused.out)>, Tokens>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(fused.lse)>,
                                   tpx::Tensor<float, B<X>, T<>, H<Y>>>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dq)>, Tokens>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dk)>, KeyTokens>);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dv)>, KeyTokens>);
      check_close(tpx::to_global(fused.out), sequence_major(r.out), 2e-5, "out");
      check_close(tpx::to_global(grad.dq), sequence_major(r.dq), 1e-4, "dq");
      check_close(tpx::to_global(grad.dk), sequence_major(r.dk), 1e-4, "dk");
      check_close(tpx::to_global(grad.dv), sequence_major(r.dv), 1e-4, "dv");
      // k and v heads first, q not: they are copied into q's order, and dk, dv come in it.
      const auto kh = tpx::permute<B, H, S, E>(k), vh = tpx::permute<B, H, S, E>(v);
      const auto mixed = tpx::nn::fused_causal_attention_forward(q, kh, vh);
      const auto mixed_grad =
          tpx::nn::fused_causal_attention_backward(q, kh, vh, mixed.out, mixed.lse, dout);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(mixed_grad.dk)>, KeyTokens>);
      check_close(tpx::to_global(mixed.out), sequence_major(r.out), 2e-5, "out, k heads first");
      check_close(tpx::to_global(mixed_grad.dk), sequence_major(r.dk), 1e-4, "dk, k heads first");
      check_close(tpx::to_global(mixed_grad.dv), sequence_major(r.dv), 1e-4, "dv, k heads first");
    });
  }
}

TEST_CASE("causal attention with batch over X and heads over Y equals the unsharded reference") {
  check_layout<B<X>, H<Y>>();
}

TEST_CASE("causal attention with heads over X and Y, batch whole, equals the reference") {
  check_layout<B<>, H<X, Y>>();
}

TEST_CASE("causal attention with batch over Y and X, heads whole, equals the reference") {
  check_layout<B<Y, X>, H<>>();
}

TEST_CASE("causal attention rejects sequences of different lengths, naming both tensors") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) {
    const auto q = tpx::randn<float, B<>, T<>, E<>>(rank, {B(2), T(4), E(3)}, 1);
    const auto k = tpx::randn<float, B<>, S<>, E<>>(rank, {B(2), S(5), E(3)}, 2);
    CHECK_THROWS_WITH_AS(tpx::nn::causal_attention_forward(q, k, k),
                         doctest::Contains("has 4 positions and k [B, S, E] has 5"),
                         std::invalid_argument);
  });
}

namespace {

// out, dq, dk, dv of attention under context parallelism, gathered: the sequence split over X,
// the heads over Y, in the projections' layout; k and v all-gathered over X before attention,
// their gradients reduce-scattered after. The tensors live in Space (the host's, or a stand-in
// for the GPU's that runs the device's grid passes).
template <class Space, class Rank>
attention_results context_parallel_attention(Rank& rank) {
  const auto& r = ref();
  const auto split = [&](const std::vector<double>& x) {
    return tpx::in_space<Space>(tpx::from_global<float, B<>, T<X>, H<Y>, E<>>(
        rank, {B(nb), T(nt), H(nh), E(ne)}, as_float(sequence_major(x))));
  };
  const auto q = split(r.q);
  const auto k = tpx::rename<T, S>(split(r.k));
  const auto v = tpx::rename<T, S>(split(r.v));
  const auto dout = tpx::in_space<Space>(tpx::from_global<float, B<>, H<Y>, T<X>, E<>>(
      rank, {B(nb), H(nh), T(nt), E(ne)}, as_float(r.dout)));
  const auto kf = tpx::all_gather<X>(k), vf = tpx::all_gather<X>(v);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(kf)>,
                               tpx::BasicTensor<Space, float, B<>, S<>, H<Y>, E<>>>);
  const auto fwd = tpx::nn::causal_attention_forward(q, kf, vf);
  const auto grad = tpx::nn::causal_attention_backward(q, kf, vf, fwd.probs, dout);
  // Each rank's queries give their share of every key's gradient: a partial sum over X.
  using Queries = tpx::BasicTensor<Space, float, B<>, H<Y>, T<X>, E<>>;
  using PartialKeys = tpx::BasicTensor<Space, float, B<>, H<Y>, S<>, E<>, tpx::Unreduced<X>>;
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(fwd.out)>, Queries>);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dq)>, Queries>);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dk)>, PartialKeys>);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dv)>, PartialKeys>);
  const auto dk = tpx::reduce_scatter<X, S>(grad.dk), dv = tpx::reduce_scatter<X, S>(grad.dv);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(dk)>,
                               tpx::BasicTensor<Space, float, B<>, H<Y>, S<X>, E<>>>);
  const auto global = [](const auto& x) { return tpx::to_global(tpx::on_host(x)); };
  return {global(fwd.out), global(grad.dq), global(dk), global(dv)};
}

// The same with the fused layer: out and dq come in q's layout [B, T_X, H_Y, E], dk and dv in
// k's, [B, S, H_Y, E]{U_X}.
template <class Rank>
attention_results fused_context_parallel_attention(Rank& rank) {
  const auto& r = ref();
  const auto split = [&](const std::vector<double>& x) {
    return tpx::from_global<float, B<>, T<X>, H<Y>, E<>>(rank, {B(nb), T(nt), H(nh), E(ne)},
                                                         as_float(sequence_major(x)));
  };
  const auto q = split(r.q), dout = split(r.dout);
  const auto kf = tpx::all_gather<X>(tpx::rename<T, S>(split(r.k)));
  const auto vf = tpx::all_gather<X>(tpx::rename<T, S>(split(r.v)));
  const auto fwd = tpx::nn::fused_causal_attention_forward(q, kf, vf);
  const auto grad = tpx::nn::fused_causal_attention_backward(q, kf, vf, fwd.out, fwd.lse, dout);
  using Queries = tpx::Tensor<float, B<>, T<X>, H<Y>, E<>>;
  using PartialKeys = tpx::Tensor<float, B<>, S<>, H<Y>, E<>, tpx::Unreduced<X>>;
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(fwd.out)>, Queries>);
  static_assert(
      std::is_same_v<std::remove_cvref_t<decltype(fwd.lse)>, tpx::Tensor<float, B<>, T<X>, H<Y>>>);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dq)>, Queries>);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dk)>, PartialKeys>);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dv)>, PartialKeys>);
  const auto dk = tpx::reduce_scatter<X, S>(grad.dk), dv = tpx::reduce_scatter<X, S>(grad.dv);
  const auto heads_first = [](const auto& x) {
    return tpx::to_global(tpx::permute<B, H, T, E>(x));
  };
  const auto keys_first = [](const auto& x) { return tpx::to_global(tpx::permute<B, H, S, E>(x)); };
  return {heads_first(fwd.out), heads_first(grad.dq), keys_first(dk), keys_first(dv)};
}

}  // namespace

TEST_CASE("context parallelism: blocks of queries over X, keys gathered, equal the reference") {
  // T = 5 over 6 ranks of X leaves one rank no queries; over 2, 3 and 4 the blocks are uneven.
  const std::vector<std::pair<int, int>> meshes = {{1, 1}, {2, 1}, {2, 2}, {3, 2}, {4, 1}, {6, 1}};
  for (const auto& [mx_, my_] : meshes) {
    const int mx = mx_, my = my_;
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      check_against_reference(context_parallel_attention<tpx::host_space>(rank));
      check_against_reference(fused_context_parallel_attention(rank));
    });
  }
}

TEST_CASE("context parallelism on the GPU's softmax passes gives the host's bits") {
  // counting_space runs the device's grid passes of the masked softmax (kernels/
  // attention_terms.hpp's functors with each rank's query block) where the host runs its rows.
  for (const auto& [mx_, my_] : std::vector<std::pair<int, int>>{{3, 2}, {6, 1}}) {
    const int mx = mx_, my = my_;
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      const attention_results host = context_parallel_attention<tpx::host_space>(rank);
      const attention_results device =
          context_parallel_attention<tpx::testing::counting_space>(rank);
      CHECK(device.out == host.out);
      CHECK(device.dq == host.dq);
      CHECK(device.dk == host.dk);
      CHECK(device.dv == host.dv);
    });
  }
}

TEST_CASE("context parallelism over two axes, heads whole, equals the reference") {
  const auto& r = ref();
  for (const auto& [mx_, my_] : std::vector<std::pair<int, int>>{{2, 2}, {3, 2}, {1, 3}}) {
    const int mx = mx_, my = my_;
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      const auto split = [&](const std::vector<double>& x) {
        return tpx::from_global<float, B<>, H<>, T<X, Y>, E<>>(rank, {B(nb), H(nh), T(nt), E(ne)},
                                                               as_float(x));
      };
      const auto q = split(r.q), dout = split(r.dout);
      const auto k = tpx::rename<T, S>(split(r.k));
      const auto v = tpx::rename<T, S>(split(r.v));
      // Y, the inner split, first.
      const auto kf = tpx::all_gather<X>(tpx::all_gather<Y>(k));
      const auto vf = tpx::all_gather<X>(tpx::all_gather<Y>(v));
      const auto fwd = tpx::nn::causal_attention_forward(q, kf, vf);
      const auto grad = tpx::nn::causal_attention_backward(q, kf, vf, fwd.probs, dout);
      const auto dk = tpx::reduce_scatter<Y, S>(tpx::reduce_scatter<X, S>(grad.dk));
      const auto dv = tpx::reduce_scatter<Y, S>(tpx::reduce_scatter<X, S>(grad.dv));
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(dk)>,
                                   tpx::Tensor<float, B<>, H<>, S<X, Y>, E<>>>);
      check_against_reference({tpx::to_global(fwd.out), tpx::to_global(grad.dq),
                               tpx::to_global(dk), tpx::to_global(dv)});
      // The fused layer over the same blocks, heads first too.
      const auto fused = tpx::nn::fused_causal_attention_forward(q, kf, vf);
      const auto fused_grad =
          tpx::nn::fused_causal_attention_backward(q, kf, vf, fused.out, fused.lse, dout);
      check_against_reference(
          {tpx::to_global(fused.out), tpx::to_global(fused_grad.dq),
           tpx::to_global(tpx::reduce_scatter<Y, S>(tpx::reduce_scatter<X, S>(fused_grad.dk))),
           tpx::to_global(tpx::reduce_scatter<Y, S>(tpx::reduce_scatter<X, S>(fused_grad.dv)))});
    });
  }
}

namespace {

// |got - want| <= absolute + relative |want| for every element.
void check_near(const std::vector<float>& got, const std::vector<float>& want, double absolute,
                double relative, const char* what) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(double(got[i]) - want[i]) <= absolute + relative * std::abs(double(want[i]))))
      ++bad;
  INFO(std::string(what) << ": " << bad << " of " << got.size() << " elements beyond " << absolute
                         << " + " << relative << " |want|");
  CHECK(bad == 0);
}

// Fused against the reference layer over several tiles of keys, heads over Y, batch over X; in
// bf16 against the fp32 reference. With Blocks, context parallelism instead: blocks of the 70
// queries over X (18, 18, 17, 17 on 4: the blocks start inside tiles of keys), k and v gathered,
// and the gradients of k and v, partial sums over X, reduce-scattered onto their blocks.
template <class Tc, bool Blocks = false>
void check_long_sequence(int mx, int my, std::int64_t e) {
  CAPTURE(mx);
  CAPTURE(my);
  CAPTURE(e);
  CAPTURE(Blocks);
  using Rows = std::conditional_t<Blocks, B<>, B<X>>;
  using Queries = std::conditional_t<Blocks, T<X>, T<>>;
  using Keys = std::conditional_t<Blocks, S<X>, S<>>;
  const std::int64_t b = 3, h = 2, t = 70;
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
    const auto whole_keys = [](const auto& x) {
      if constexpr (Blocks)
        return tpx::all_gather<X>(x);
      else
        return x;
    };
    const auto key_blocks = [](const auto& dx) {
      if constexpr (Blocks)
        return tpx::reduce_scatter<X, S>(dx);
      else
        return dx;
    };
    const auto q = tpx::randn<float, Rows, Queries, H<Y>, E<>>(rank, {B(b), T(t), H(h), E(e)}, 11);
    const auto k = whole_keys(
        tpx::randn<float, Rows, Keys, H<Y>, E<>>(rank, {B(b), S(t), H(h), E(e)}, 12));
    const auto v = whole_keys(
        tpx::randn<float, Rows, Keys, H<Y>, E<>>(rank, {B(b), S(t), H(h), E(e)}, 13));
    const auto dout =
        tpx::randn<float, Rows, Queries, H<Y>, E<>>(rank, {B(b), T(t), H(h), E(e)}, 14);
    const auto want = tpx::nn::causal_attention_forward(q, k, v);
    const auto want_grad =
        tpx::nn::causal_attention_backward(q, k, v, want.probs, tpx::permute<B, H, T, E>(dout));
    // The fused layer reads q, k, v [B, T, H, E] in place and answers in that layout; the
    // reference answers heads first.
    const auto fused = tpx::nn::fused_causal_attention_forward(tpx::cast<Tc>(q), tpx::cast<Tc>(k),
                                                               tpx::cast<Tc>(v));
    const auto grad = tpx::nn::fused_causal_attention_backward(
        tpx::cast<Tc>(q), tpx::cast<Tc>(k), tpx::cast<Tc>(v), fused.out, fused.lse,
        tpx::cast<Tc>(dout));
    const double tol = std::is_same_v<Tc, float> ? 2e-5 : 2e-2;
    const double rel = std::is_same_v<Tc, float> ? 1e-5 : 2e-2;
    const auto global = [](const auto& x) { return tpx::to_global(tpx::cast<float>(x)); };
    check_near(global(tpx::permute<B, H, T, E>(fused.out)), tpx::to_global(want.out), tol, rel,
               "out");
    check_near(global(tpx::permute<B, H, T, E>(grad.dq)), tpx::to_global(want_grad.dq), tol, rel,
               "dq");
    check_near(global(tpx::permute<B, H, S, E>(key_blocks(grad.dk))),
               tpx::to_global(key_blocks(want_grad.dk)), tol, rel, "dk");
    check_near(global(tpx::permute<B, H, S, E>(key_blocks(grad.dv))),
               tpx::to_global(key_blocks(want_grad.dv)), tol, rel, "dv");
  });
}

}  // namespace

TEST_CASE("fused attention over several tiles of keys equals the reference layer") {
  check_long_sequence<float>(1, 1, 6);
  check_long_sequence<float>(2, 2, 6);
  check_long_sequence<float>(3, 2, tpx::kernels::fused_attention_max_head);
  check_long_sequence<tpx::bf16>(2, 1, 16);
}

TEST_CASE("fused attention over blocks of queries and several tiles equals the reference layer") {
  check_long_sequence<float, true>(2, 1, 6);
  check_long_sequence<float, true>(4, 2, 6);
  check_long_sequence<float, true>(3, 1, tpx::kernels::fused_attention_max_head);
  check_long_sequence<tpx::bf16, true>(4, 1, 16);
}

TEST_CASE("fused attention refuses a head wider than its kernels take, naming the width") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) {
    const std::int64_t e = tpx::kernels::fused_attention_max_head + 1;
    const auto q = tpx::randn<float, B<>, T<>, E<>>(rank, {B(1), T(2), E(e)}, 1);
    const auto k = tpx::randn<float, B<>, S<>, E<>>(rank, {B(1), S(2), E(e)}, 2);
    CHECK_THROWS_WITH_AS(
        tpx::nn::fused_causal_attention_forward(q, k, k),
        doctest::Contains("head width E = 129 is more than the fused kernels' 128"),
        std::invalid_argument);
  });
}

namespace {

// The host takes the row kernel; the stand-ins for the device space take the device's grid passes.
static_assert(tpx::nn::detail::row_causal_softmax_space<tpx::host_space, float>);
static_assert(tpx::nn::detail::row_causal_softmax_space<tpx::host_space, tpx::bf16>);
static_assert(!tpx::nn::detail::row_causal_softmax_space<tpx::testing::counting_space, float>);
static_assert(!tpx::nn::detail::row_causal_softmax_space<tpx::testing::recording_space, float>);

// The host's row softmax (host_space::causal_softmax_rows, which nn::causal_attention_forward
// calls) against the three grid passes a space without it runs (the GPU's), on the same scores
// [B, H, T, S], normal of deviation `spread`: the same bits, masked keys exactly 0, and each
// visible row within 1e-6 (fp32) or 1e-2 (bf16) + 1e-2 |want| of the softmax taken in double. A
// spread of 8 keeps every term above e^-16; one of 400 takes most terms below e^-87, to
// subnormals and 0. The rows are the queries [first, first + queries) of each sequence of t_len
// keys (all of them by default; a block of them under context parallelism).
template <class Tc>
void check_row_softmax(std::int64_t t_len, double spread, std::int64_t queries = -1,
                       std::int64_t first = 0) {
  if (queries < 0) queries = t_len;
  CAPTURE(t_len);
  CAPTURE(spread);
  CAPTURE(queries);
  CAPTURE(first);
  const std::int64_t b = 2, h = 3, rows = b * h * queries, n = rows * t_len;
  const float scale = 0.25f;
  const tpx::kernels::query_block block{queries, first};
  std::vector<double> scores = normal_values(n, 21);
  for (double& x : scores) x = static_cast<float>(spread * x);
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) {
    const auto make = [&] {
      return tpx::cast<Tc>(tpx::from_global<float, B<>, H<>, T<>, S<>>(
          rank, {B(b), H(h), T(queries), S(t_len)}, as_float(scores)));
    };
    auto by_rows = make(), by_grid = make();
    const std::vector<float> given = tpx::to_global(tpx::cast<float>(by_rows));
    tpx::host_space::causal_softmax_rows(by_rows.context(), rows, t_len, block, scale,
                                         by_rows.data());
    tpx::nn::detail::causal_softmax_in_grid_passes(by_grid, {rows, t_len, block, scale});
    const std::vector<float> got = tpx::to_global(tpx::cast<float>(by_rows));
    const std::vector<float> grid = tpx::to_global(tpx::cast<float>(by_grid));
    std::int64_t differ = 0, masked_nonzero = 0, far = 0;
    const double tol = std::is_same_v<Tc, float> ? 1e-6 : 1e-2;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t visible = first + r % queries + 1;
      double m = -INFINITY, l = 0;
      for (std::int64_t c = 0; c < visible; ++c)
        m = std::max(m, scale * double(given[r * t_len + c]));
      for (std::int64_t c = 0; c < visible; ++c)
        l += std::exp(scale * double(given[r * t_len + c]) - m);
      for (std::int64_t c = 0; c < t_len; ++c) {
        const std::int64_t i = r * t_len + c;
        differ += std::memcmp(&got[i], &grid[i], sizeof(float)) != 0;
        if (c >= visible) {
          masked_nonzero += got[i] != 0.0f;
        } else {
          const double want = std::exp(scale * double(given[i]) - m) / l;
          far +=
              !(std::abs(got[i] - want) <= tol + (std::is_same_v<Tc, float> ? 0.0 : 1e-2 * want));
        }
      }
    }
    CHECK_MESSAGE(differ == 0,
                  differ << " of " << n << " probabilities differ from the grid passes'");
    CHECK_MESSAGE(masked_nonzero == 0, masked_nonzero << " masked probabilities are not 0");
    CHECK_MESSAGE(far == 0,
                  far << " visible probabilities differ from double's by more than " << tol);
  });
}

}  // namespace

TEST_CASE("the host's causal softmax, a row at a time, gives the grid passes' bits") {
  // 1 and 5: the rows' scalar remainders only; 16, 17, 70: whole blocks of 16 keys and the rest.
  for (const std::int64_t t_len : {1, 5, 16, 17, 70}) {
    for (const double spread : {8.0, 400.0}) {
      check_row_softmax<float>(t_len, spread);
      check_row_softmax<tpx::bf16>(t_len, spread);
    }
  }
}

TEST_CASE("the host's causal softmax of a block of queries gives the grid passes' bits") {
  // Blocks of context parallelism: the first, a middle one, the last, one of a single query.
  check_row_softmax<float>(70, 8.0, 24, 0);
  check_row_softmax<float>(70, 8.0, 23, 24);
  check_row_softmax<float>(70, 400.0, 23, 47);
  check_row_softmax<tpx::bf16>(70, 8.0, 23, 47);
  check_row_softmax<float>(17, 8.0, 1, 16);
}

TEST_CASE("the host's causal softmax makes a row with a NaN score NaN, and no other row") {
  const std::int64_t t_len = 37, rows = 2 * t_len, nan_row = t_len + 20, nan_key = 17;
  std::vector<double> scores = normal_values(rows * t_len, 22);
  scores[nan_row * t_len + nan_key] = NAN;
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) {
    auto p =
        tpx::from_global<float, B<>, T<>, S<>>(rank, {B(2), T(t_len), S(t_len)}, as_float(scores));
    tpx::host_space::causal_softmax_rows(p.context(), rows, t_len, {t_len, 0}, 1.0f, p.data());
    const std::vector<float> got = tpx::to_global(p);
    std::int64_t wrong = 0, masked_nonzero = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < t_len; ++c) {
        if (c <= r % t_len)
          wrong += std::isnan(got[r * t_len + c]) != (r == nan_row);
        else
          masked_nonzero += got[r * t_len + c] != 0.0f;
      }
    CHECK_MESSAGE(wrong == 0, wrong << " visible probabilities are NaN outside row " << nan_row
                                    << " or finite in it");
    CHECK_MESSAGE(masked_nonzero == 0, masked_nonzero << " masked probabilities are not 0");
  });
}

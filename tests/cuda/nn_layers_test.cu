// The layers of tpx/nn on device tensors against the same layers on the host backend (whose own
// test, tests/unit/nn_layers_test.cpp, checks them against naive loops): RMSNorm over D_Y,
// vocab-parallel cross-entropy over V_Y, the embedding lookup and gradient, and causal attention
// with batch over X and heads over Y, the reference and the fused layer, and the reference with
// the sequence over X (context parallelism: blocks of queries) (forward and backward;
// tests/unit/attention_test.cpp checks the host's against finite differences), and GELU fused
// into the MLP's products (cuBLASLt's GELU epilogues, 4e-3 relative as for a hardware tanh;
// tests/unit/gelu_product_test.cpp checks the host's against loops), on a 2x2 mesh of
// streams on one GPU (spmd(tpx::cuda_simulated, ...)) with uneven extents. Host and device run the
// same functors (kernels/grid_terms.hpp); the device sums rows in a block tree, in another order
// than the host loops, so results agree to a few fp32 ulps of the summed magnitudes: 1e-5
// relative here. The embedding gradient sums each token's rows in an order fixed by the tokens
// (cuda/kernels/scatter_rows.hpp): over 3000 rows of a byte vocabulary it repeats to the bit, is
// the host's bit for bit where no token's run of sorted rows crosses a piece, and is within
// 1e-5 of each sum's magnitudes where 40 % of the rows share a token. Fused attention over
// sequences of several tiles (T = 70) and the widest head (E = 128) in fp32 (1e-5 relative) and
// bf16 (2e-2 relative: at E = 64 and 128 bf16 runs on the tensor-core kernels, which round P and
// dS to bf16 before their second product, as FlashAttention-2 does, where the host twin keeps
// them in fp32), and over blocks of queries (the sequence over X: 1e-5 fp32; bf16 2e-2 at E = 64,
// on the tensor-core kernels over each rank's block, 1e-2 at E = 8 on the CUDA-core ones, the
// outputs' rounding to bf16 after the same fp32 sums in another order). Grouped-query attention
// (2 query heads per key head, tpx::nn::query_groups), the fused layer at E = 8 (CUDA-core
// kernels) and 64 (tensor cores in bf16) and the reference layer, at the same tolerances.
// RMSNorm over an unsplit D (x[B_X, T_Y, D], sequence parallelism's layout) runs on the device's
// whole-row kernels instead of the grid loops, which the host keeps: at D = 768 (one warp per row,
// 16-byte vectors), 36 (a warp per row, element by element), 1100 (the block's 8 warps on a row)
// and 8200 (a block per row with running sums), in fp32
// (1e-5 relative) and bf16 inputs (1e-2, about two bf16 ulps of the outputs; rstd and dw are fp32
// sums: 1e-5).
// Skipped without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tpx/cuda/cuda.hpp>
#include <tpx/nn/attention.hpp>
#include <tpx/nn/cross_entropy.hpp>
#include <tpx/nn/embedding.hpp>
#include <tpx/nn/fused_attention.hpp>
#include <tpx/nn/gelu_product.hpp>
#include <tpx/nn/rmsnorm.hpp>
#include <type_traits>
#include <vector>

namespace {

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, D, V, W, H, G, T, S, E, F);

template <class T>
concept host_readable = requires(T& t) { t.local(); };
static_assert(!host_readable<tpx::DeviceTensor<float, B<X>, D<Y>>>,
              "a device tensor's elements must not be readable from the host");

std::vector<float> values(std::int64_t n, std::uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = scale * tpx::kernels::normal_at(seed, static_cast<std::uint64_t>(i));
  return v;
}

// Every output of the three layers, as global arrays, from one launcher.
struct outputs {
  std::vector<std::vector<float>> arrays;
};

template <class Launcher>
outputs run_layers(Launcher launcher) {
  const std::int64_t rows = 9, d = 10, vocab = 13, width = 2;
  const std::int64_t heads = 3, seq = 7, head_dim = 8, qkv = rows * heads * seq * head_dim, ffn = 16;
  const auto x = values(rows * d, 1), w = values(d, 2), dy = values(rows * d, 3);
  const auto logits = values(rows * vocab, 4, 3.0f), table = values(vocab * d, 5);
  std::vector<std::int32_t> tokens(rows * width);
  for (std::int64_t i = 0; i < rows * width; ++i) tokens[i] = static_cast<std::int32_t>((i * 7 + 3) % vocab);
  const auto q = values(qkv, 6), k = values(qkv, 7), v = values(qkv, 8), dout = values(qkv, 9);
  outputs out;
  tpx::spmd(launcher, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    const auto xs = tpx::from_global<float, B<X>, D<Y>>(rank, {B(rows), D(d)}, x);
    const auto ws = tpx::from_global<float, D<Y>>(rank, {D(d)}, w);
    const auto dys = tpx::from_global<float, B<X>, D<Y>>(rank, {B(rows), D(d)}, dy);
    const auto ls = tpx::from_global<float, B<X>, V<Y>>(rank, {B(rows), V(vocab)}, logits);
    const auto ts = tpx::from_global<std::int32_t, B<X>, W<>>(rank, {B(rows), W(width)}, tokens);
    const auto tab = tpx::from_global<float, V<>, D<Y>>(rank, {V(vocab), D(d)}, table);
    const auto fwd = tpx::nn::rmsnorm_forward(xs, ws);
    const auto bwd = tpx::nn::rmsnorm_backward(xs, ws, fwd.rstd, dys);
    const auto ce = tpx::nn::cross_entropy(ls, ts, 1);
    auto emb = tpx::zeros<float, B<X>, D<Y>>(rank, {B(rows), D(d)});
    tpx::nn::embedding_add(emb, tab, ts, 0);
    const auto demb = tpx::nn::embedding_gradient<V>(dys, ts, 1, vocab);
    const auto qs = tpx::from_global<float, B<X>, H<Y>, T<>, E<>>(rank, {B(rows), H(heads), T(seq), E(head_dim)}, q);
    const auto ks = tpx::from_global<float, B<X>, H<Y>, S<>, E<>>(rank, {B(rows), H(heads), S(seq), E(head_dim)}, k);
    const auto vs = tpx::from_global<float, B<X>, H<Y>, S<>, E<>>(rank, {B(rows), H(heads), S(seq), E(head_dim)}, v);
    const auto douts = tpx::from_global<float, B<X>, H<Y>, T<>, E<>>(rank, {B(rows), H(heads), T(seq), E(head_dim)}, dout);
    const auto att = tpx::nn::causal_attention_forward(qs, ks, vs);
    const auto datt = tpx::nn::causal_attention_backward(qs, ks, vs, att.probs, douts);
    const auto fused = tpx::nn::fused_causal_attention_forward(qs, ks, vs);
    const auto dfused = tpx::nn::fused_causal_attention_backward(qs, ks, vs, fused.out, fused.lse, douts);
    // Context parallelism: the sequence over X (blocks of 4 and 3 queries), heads over Y, keys
    // and values gathered, their gradients reduce-scattered.
    const auto qc = tpx::from_global<float, B<>, H<Y>, T<X>, E<>>(rank, {B(rows), H(heads), T(seq), E(head_dim)}, q);
    const auto kc = tpx::from_global<float, B<>, H<Y>, S<X>, E<>>(rank, {B(rows), H(heads), S(seq), E(head_dim)}, k);
    const auto vc = tpx::from_global<float, B<>, H<Y>, S<X>, E<>>(rank, {B(rows), H(heads), S(seq), E(head_dim)}, v);
    const auto doutc = tpx::from_global<float, B<>, H<Y>, T<X>, E<>>(rank, {B(rows), H(heads), T(seq), E(head_dim)}, dout);
    const auto kcf = tpx::all_gather<X>(kc), vcf = tpx::all_gather<X>(vc);
    const auto cp = tpx::nn::causal_attention_forward(qc, kcf, vcf);
    const auto dcp = tpx::nn::causal_attention_backward(qc, kcf, vcf, cp.probs, doutc);
    // [B_X, D_Y] *_D [D, F_Y]: each rank's F block is 8 wide, as cuBLASLt's GELU epilogues need.
    const auto w_in = tpx::from_global<float, D<>, F<Y>>(rank, {D(d), F(ffn)}, values(d * ffn, 15));
    const auto w_out = tpx::from_global<float, F<Y>, D<>>(rank, {F(ffn), D(d)}, values(ffn * d, 16));
    const auto up = tpx::nn::gelu_product<D>(xs, w_in);
    const auto dup = tpx::nn::gelu_product_backward<D>(up.pre, tpx::reshard<tpx::Tensor<float, B<X>, D<>>>(dys), w_out);
    std::vector<std::vector<float>> all = {tpx::to_global(fwd.y),       tpx::to_global(fwd.rstd),
                                           tpx::to_global(bwd.dx),      tpx::to_global(bwd.dw),
                                           {tpx::scalar_on_host(ce.loss)}, tpx::to_global(ce.dlogits),
                                           tpx::to_global(emb),         tpx::to_global(demb),
                                           tpx::to_global(att.out),     tpx::to_global(datt.dq),
                                           tpx::to_global(datt.dk),     tpx::to_global(datt.dv),
                                           tpx::to_global(fused.out),   tpx::to_global(fused.lse),
                                           tpx::to_global(dfused.dq),   tpx::to_global(dfused.dk),
                                           tpx::to_global(dfused.dv),   tpx::to_global(up.pre),
                                           tpx::to_global(up.out),      tpx::to_global(dup),
                                           tpx::to_global(cp.out),      tpx::to_global(dcp.dq),
                                           tpx::to_global(tpx::reduce_scatter<X, S>(dcp.dk)),
                                           tpx::to_global(tpx::reduce_scatter<X, S>(dcp.dv))};
    if (rank.world_rank() == 0) out.arrays = std::move(all);
  });
  return out;
}

// Fused attention's outputs over T = 70 (three tiles of keys) with heads of width e, in element
// type Tc, as fp32 global arrays: out, lse, dq, dk, dv. Batch over X, or with Blocks the sequence
// (context parallelism: blocks of 35 queries, k and v gathered, their gradients reduce-scattered).
template <class Tc, bool Blocks = false, class Launcher>
std::vector<std::vector<float>> run_fused_attention(Launcher launcher, std::int64_t e) {
  const std::int64_t b = 3, h = 2, t = 70, n = b * h * t * e;
  const auto q = values(n, 11), k = values(n, 12), v = values(n, 13), dout = values(n, 14);
  using Rows = std::conditional_t<Blocks, B<>, B<X>>;
  using Positions = std::conditional_t<Blocks, T<X>, T<>>;
  std::vector<std::vector<float>> out;
  tpx::spmd(launcher, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    const auto in = [&](const std::vector<float>& x) {
      return tpx::cast<Tc>(tpx::from_global<float, Rows, Positions, H<Y>, E<>>(rank, {B(b), T(t), H(h), E(e)}, x));
    };
    const auto keys = [&](const std::vector<float>& x) {
      if constexpr (Blocks)
        return tpx::all_gather<X>(tpx::rename<T, S>(in(x)));
      else
        return tpx::rename<T, S>(in(x));
    };
    const auto key_gradient = [](const auto& g) {
      if constexpr (Blocks)
        return tpx::reduce_scatter<X, S>(g);
      else
        return g;
    };
    const auto ks = keys(k);
    const auto vs = keys(v);
    const auto qs = in(q);
    const auto douts = in(dout);  // laid out as the output, like q
    const auto fwd = tpx::nn::fused_causal_attention_forward(qs, ks, vs);
    const auto grad = tpx::nn::fused_causal_attention_backward(qs, ks, vs, fwd.out, fwd.lse, douts);
    const auto global = [](const auto& x) { return tpx::to_global(tpx::cast<float>(x)); };
    std::vector<std::vector<float>> all = {global(fwd.out), tpx::to_global(fwd.lse), global(grad.dq),
                                           global(key_gradient(grad.dk)), global(key_gradient(grad.dv))};
    if (rank.world_rank() == 0) out = std::move(all);
  });
  return out;
}

// Grouped-query attention's outputs (2 query heads per key head: q [B_X, T, H_Y, G, E], k and v
// [B_X, S, H_Y, E], T = 70) in element type Tc, as fp32 global arrays: the fused layer's out, lse,
// dq, dk, dv, then the reference layer's out, dq, dk, dv (the grid passes' softmax on the device).
template <class Tc, class Launcher>
std::vector<std::vector<float>> run_grouped_attention(Launcher launcher, std::int64_t e) {
  const std::int64_t b = 3, h = 2, g = 2, t = 70, nq = b * t * h * g * e, nk = b * t * h * e;
  const auto q = values(nq, 31), k = values(nk, 32), v = values(nk, 33), dout = values(nq, 34);
  std::vector<std::vector<float>> out;
  tpx::spmd(launcher, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    const auto queries = [&](const std::vector<float>& x) {
      return tpx::cast<Tc>(tpx::from_global<float, B<X>, T<>, H<Y>, G<>, E<>>(
          rank, {B(b), T(t), H(h), G(g), E(e)}, x));
    };
    const auto keys = [&](const std::vector<float>& x) {
      return tpx::cast<Tc>(
          tpx::from_global<float, B<X>, S<>, H<Y>, E<>>(rank, {B(b), S(t), H(h), E(e)}, x));
    };
    const auto qs = queries(q), douts = queries(dout);
    const auto ks = keys(k), vs = keys(v);
    using groups = tpx::nn::query_groups<G>;
    const auto fused = tpx::nn::fused_causal_attention_forward<groups>(qs, ks, vs);
    const auto dfused =
        tpx::nn::fused_causal_attention_backward<groups>(qs, ks, vs, fused.out, fused.lse, douts);
    const auto fwd = tpx::nn::causal_attention_forward<groups>(qs, ks, vs);
    const auto grad = tpx::nn::causal_attention_backward<groups>(
        qs, ks, vs, fwd.probs, tpx::permute<B, H, T, G, E>(douts));
    const auto global = [](const auto& x) { return tpx::to_global(tpx::cast<float>(x)); };
    std::vector<std::vector<float>> all = {
        global(fused.out), tpx::to_global(fused.lse), global(dfused.dq),
        global(dfused.dk), global(dfused.dv),         global(fwd.out),
        global(grad.dq),   global(grad.dk),           global(grad.dv)};
    if (rank.world_rank() == 0) out = std::move(all);
  });
  return out;
}

// The device space has the whole-row kernels the layer takes when a rank holds whole rows; the
// host space keeps its grid loops.
static_assert(tpx::nn::detail::has_whole_row_kernels<tpx::DeviceTensor<tpx::bf16, B<X>, T<Y>, D<>>,
                                                     tpx::DeviceTensor<tpx::bf16, D<>>>);
static_assert(tpx::nn::detail::has_whole_row_kernels<tpx::DeviceTensor<float, B<X>, D<Y>>,
                                                     tpx::DeviceTensor<float, D<Y>>>);
static_assert(!tpx::nn::detail::has_whole_row_kernels<tpx::Tensor<float, B<X>, T<Y>, D<>>, tpx::Tensor<float, D<>>>);

// RMSNorm's y, rstd, dx and dw over x[B_X, T_Y, D] (D whole on every rank) in element type Tc, as
// fp32 global arrays.
template <class Tc, class Launcher>
std::vector<std::vector<float>> run_whole_row_rmsnorm(Launcher launcher, std::int64_t d) {
  const std::int64_t b = 3, t = 7;
  const auto x = values(b * t * d, 21), w = values(d, 22), dy = values(b * t * d, 23);
  std::vector<std::vector<float>> out;
  tpx::spmd(launcher, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    const auto rows = [&](const std::vector<float>& v) {
      return tpx::cast<Tc>(tpx::from_global<float, B<X>, T<Y>, D<>>(rank, {B(b), T(t), D(d)}, v));
    };
    const auto xs = rows(x), dys = rows(dy);
    const auto ws = tpx::cast<Tc>(tpx::from_global<float, D<>>(rank, {D(d)}, w));
    const auto fwd = tpx::nn::rmsnorm_forward(xs, ws);
    const auto bwd = tpx::nn::rmsnorm_backward(xs, ws, fwd.rstd, dys);
    const auto global = [](const auto& a) { return tpx::to_global(tpx::cast<float>(a)); };
    std::vector<std::vector<float>> all = {global(fwd.y), tpx::to_global(fwd.rstd), global(bwd.dx),
                                           tpx::to_global(bwd.dw)};
    if (rank.world_rank() == 0) out = std::move(all);
  });
  return out;
}

// The number of elements of got farther from want than relative * max |want|.
std::size_t beyond(const std::vector<float>& got, const std::vector<float>& want, double relative) {
  double scale = 0;
  for (float v : want) scale = std::max(scale, double(std::abs(v)));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!(std::abs(double(got[i]) - want[i]) <= relative * scale)) ++bad;
  return bad;
}

using arrays = std::vector<std::vector<float>>;

// Each array of the device's runs against the host's: in fp32 within 1e-5 of the array's largest
// element, in bf16 within bf16_tolerance(a) of it for array a.
template <class Tolerance>
void check_arrays_follow_host(const std::vector<const char*>& names, const arrays& host,
                              const arrays& device, const arrays& host_bf16,
                              const arrays& device_bf16, const Tolerance& bf16_tolerance) {
  REQUIRE(host.size() == names.size());
  for (std::size_t a = 0; a < host.size(); ++a) {
    REQUIRE(device[a].size() == host[a].size());
    INFO(names[a] << " fp32: " << beyond(device[a], host[a], 1e-5) << " elements beyond 1e-5");
    CHECK(beyond(device[a], host[a], 1e-5) == 0);
    const double tolerance = bf16_tolerance(a);
    INFO(names[a] << " bf16: " << beyond(device_bf16[a], host_bf16[a], tolerance)
                  << " elements beyond " << tolerance);
    CHECK(beyond(device_bf16[a], host_bf16[a], tolerance) == 0);
  }
}

// The fused layer's out, lse, dq, dk and dv on the device against the host's (run_fused_attention
// with Blocks), in fp32 (1e-5 of each array's largest element) and bf16 (bf16_tolerance).
template <bool Blocks>
void check_fused_attention_on_device(std::int64_t e, double bf16_tolerance) {
  CAPTURE(e);
  check_arrays_follow_host({"out", "lse", "dq", "dk", "dv"},
                           run_fused_attention<float, Blocks>(tpx::host, e),
                           run_fused_attention<float, Blocks>(tpx::cuda_simulated, e),
                           run_fused_attention<tpx::bf16, Blocks>(tpx::host, e),
                           run_fused_attention<tpx::bf16, Blocks>(tpx::cuda_simulated, e),
                           [&](std::size_t) { return bf16_tolerance; });
}

}  // namespace

TEST_CASE("fused attention on the device equals its host twin, over several tiles and the widest head") {
  for (std::int64_t e : {std::int64_t{8}, std::int64_t{64}, std::int64_t{tpx::kernels::fused_attention_max_head}})
    check_fused_attention_on_device<false>(e, 2e-2);
}

TEST_CASE("fused attention over blocks of queries on the device equals its host twin") {
  // Context parallelism: the sequence over X, k and v gathered; bf16 at E = 64 takes the
  // tensor-core kernels over each rank's block (P and dS rounded to bf16), at E = 8 the CUDA-core
  // ones, which keep them in fp32 as the twin.
  check_fused_attention_on_device<true>(8, 1e-2);
  check_fused_attention_on_device<true>(64, 2e-2);
}

TEST_CASE("grouped-query attention on the device equals its host twin") {
  // E = 8 on the CUDA-core kernels, 64 in bf16 on the tensor-core ones (P and dS rounded to
  // bf16, 2e-2 as above); fp32 at 1e-5 of each array's largest element.
  for (const std::int64_t e : {std::int64_t{8}, std::int64_t{64}}) {
    CAPTURE(e);
    check_arrays_follow_host(
        {"fused out", "fused lse", "fused dq", "fused dk", "fused dv", "out", "dq", "dk", "dv"},
        run_grouped_attention<float>(tpx::host, e),
        run_grouped_attention<float>(tpx::cuda_simulated, e),
        run_grouped_attention<tpx::bf16>(tpx::host, e),
        run_grouped_attention<tpx::bf16>(tpx::cuda_simulated, e), [](std::size_t) { return 2e-2; });
  }
}

TEST_CASE("RMSNorm over whole rows on the device's row kernels equals the host's grid loops") {
  for (std::int64_t d : {std::int64_t{768}, std::int64_t{36}, std::int64_t{1100}, std::int64_t{8200}}) {
    CAPTURE(d);
    // rstd and dw are fp32 sums in both
    check_arrays_follow_host({"y", "rstd", "dx", "dw"}, run_whole_row_rmsnorm<float>(tpx::host, d),
                             run_whole_row_rmsnorm<float>(tpx::cuda_simulated, d),
                             run_whole_row_rmsnorm<tpx::bf16>(tpx::host, d),
                             run_whole_row_rmsnorm<tpx::bf16>(tpx::cuda_simulated, d),
                             [](std::size_t a) { return a == 1 || a == 3 ? 1e-5 : 1e-2; });
  }
}

// The embedding gradient of rows of dy (normal draws, width d) with the given tokens, on one rank.
template <class Launcher>
std::vector<float> embedding_gradient_of(Launcher launcher, const std::vector<std::int32_t>& tokens,
                                         std::int64_t vocab, std::int64_t d) {
  const auto rows = static_cast<std::int64_t>(tokens.size());
  const auto dy = values(rows * d, 21);
  std::vector<float> out;
  tpx::spmd(launcher, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) {
    const auto dys = tpx::from_global<float, B<X>, D<Y>>(rank, {B(rows), D(d)}, dy);
    const auto ts = tpx::from_global<std::int32_t, B<X>, W<>>(rank, {B(rows), W(1)}, tokens);
    out = tpx::to_global(tpx::nn::embedding_gradient<V>(dys, ts, 0, vocab));
  });
  return out;
}

TEST_CASE("the embedding gradient on the device repeats to the bit and follows the host's loop") {
  const std::int64_t rows = 3000, vocab = 256, d = 96;
  std::vector<std::int32_t> aligned(rows), skewed(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    aligned[r] = static_cast<std::int32_t>(r / 16);  // runs of 16 rows, inside the pieces of 64
    const tpx::kernels::philox_words draw =
        tpx::kernels::random_words_at(22, static_cast<std::uint64_t>(r));
    skewed[r] =
        draw.w[0] % 10 < 4 ? 32 : static_cast<std::int32_t>(draw.w[1] % vocab);  // 40 % spaces
  }
  const auto bits_equal = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  const auto host_aligned = embedding_gradient_of(tpx::host, aligned, vocab, d);
  const auto device_aligned = embedding_gradient_of(tpx::cuda_simulated, aligned, vocab, d);
  CHECK(bits_equal(device_aligned, host_aligned));
  CHECK(bits_equal(embedding_gradient_of(tpx::cuda_simulated, aligned, vocab, d), device_aligned));

  const auto host_skewed = embedding_gradient_of(tpx::host, skewed, vocab, d);
  const auto device_skewed = embedding_gradient_of(tpx::cuda_simulated, skewed, vocab, d);
  CHECK(bits_equal(embedding_gradient_of(tpx::cuda_simulated, skewed, vocab, d), device_skewed));
  const auto dy = values(rows * d, 21);
  std::vector<double> magnitude(static_cast<std::size_t>(vocab * d));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < d; ++c) magnitude[skewed[r] * d + c] += std::abs(dy[r * d + c]);
  REQUIRE(device_skewed.size() == magnitude.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < magnitude.size(); ++i)
    if (!(std::abs(double(device_skewed[i]) - host_skewed[i]) <= 1e-5 * magnitude[i])) ++bad;
  INFO(bad << " of " << magnitude.size()
           << " elements differ by more than 1e-5 of their sum's magnitude");
  CHECK(bad == 0);
}

TEST_CASE("nn layers on device tensors equal the host layers") {
  const outputs host = run_layers(tpx::host);
  const outputs device = run_layers(tpx::cuda_simulated);
  const char* names[] = {"rmsnorm y", "rmsnorm rstd", "rmsnorm dx", "rmsnorm dw",
                         "cross-entropy loss", "cross-entropy dlogits", "embedding", "embedding gradient",
                         "attention out",    "attention dq",         "attention dk", "attention dv",
                         "fused out",        "fused lse",            "fused dq",     "fused dk",
                         "fused dv",         "gelu_product pre",     "gelu_product out",
                         "gelu_product_backward", "context-parallel out", "context-parallel dq",
                         "context-parallel dk", "context-parallel dv"};
  // GELU and its slope from cuBLASLt's epilogues may use a hardware tanh (about 2^-11 relative);
  // the pre-activation is the plain product.
  const auto tolerance = [&](std::size_t a) {
    const std::string name = names[a];
    return name == "gelu_product out" || name == "gelu_product_backward" ? 4e-3 : 1e-5;
  };
  REQUIRE(device.arrays.size() == host.arrays.size());
  for (std::size_t a = 0; a < host.arrays.size(); ++a) {
    const auto& h = host.arrays[a];
    const auto& g = device.arrays[a];
    REQUIRE(g.size() == h.size());
    double scale = 0;
    for (float v : h) scale = std::max(scale, double(std::abs(v)));
    std::size_t bad = 0;
    for (std::size_t i = 0; i < h.size(); ++i)
      if (!(std::abs(double(g[i]) - h[i]) <= tolerance(a) * scale)) ++bad;
    INFO(names[a] << ": " << bad << " of " << h.size() << " elements differ by more than " << tolerance(a) << " of "
                  << scale);
    CHECK(bad == 0);
  }
}

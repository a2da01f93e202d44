// The layers of tpx/nn on device tensors against the same layers on the host backend (whose own
// test, tests/unit/nn_layers_test.cpp, checks them against naive loops): RMSNorm over D_Y,
// vocab-parallel cross-entropy over V_Y, the embedding lookup and gradient, and causal attention
// with batch over X and heads over Y (forward and backward; tests/unit/attention_test.cpp checks
// the host's against finite differences), on a 2x2 mesh of
// streams on one GPU (spmd(tpx::cuda_simulated, ...)) with uneven extents. Host and device run the
// same functors (kernels/grid_terms.hpp); the device sums rows in a block tree and the embedding
// gradient with atomics, in other orders than the host loops, so results agree to a few fp32 ulps
// of the summed magnitudes: 1e-5 relative here. Skipped without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <tpx/cuda/cuda.hpp>
#include <tpx/nn/attention.hpp>
#include <tpx/nn/cross_entropy.hpp>
#include <tpx/nn/embedding.hpp>
#include <tpx/nn/rmsnorm.hpp>
#include <vector>

namespace {

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, D, V, W, H, T, S, E);

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
  const std::int64_t heads = 3, seq = 7, head_dim = 8, qkv = rows * heads * seq * head_dim;
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
    std::vector<std::vector<float>> all = {tpx::to_global(fwd.y),       tpx::to_global(fwd.rstd),
                                           tpx::to_global(bwd.dx),      tpx::to_global(bwd.dw),
                                           {tpx::scalar_on_host(ce.loss)}, tpx::to_global(ce.dlogits),
                                           tpx::to_global(emb),         tpx::to_global(demb),
                                           tpx::to_global(att.out),     tpx::to_global(datt.dq),
                                           tpx::to_global(datt.dk),     tpx::to_global(datt.dv)};
    if (rank.world_rank() == 0) out.arrays = std::move(all);
  });
  return out;
}

}  // namespace

TEST_CASE("nn layers on device tensors equal the host layers") {
  const outputs host = run_layers(tpx::host);
  const outputs device = run_layers(tpx::cuda_simulated);
  const char* names[] = {"rmsnorm y", "rmsnorm rstd", "rmsnorm dx", "rmsnorm dw",
                         "cross-entropy loss", "cross-entropy dlogits", "embedding", "embedding gradient",
                         "attention out",    "attention dq",         "attention dk", "attention dv"};
  REQUIRE(device.arrays.size() == host.arrays.size());
  for (std::size_t a = 0; a < host.arrays.size(); ++a) {
    const auto& h = host.arrays[a];
    const auto& g = device.arrays[a];
    REQUIRE(g.size() == h.size());
    double scale = 0;
    for (float v : h) scale = std::max(scale, double(std::abs(v)));
    std::size_t bad = 0;
    for (std::size_t i = 0; i < h.size(); ++i)
      if (!(std::abs(double(g[i]) - h[i]) <= 1e-5 * scale)) ++bad;
    INFO(names[a] << ": " << bad << " of " << h.size() << " elements differ by more than 1e-5 of " << scale);
    CHECK(bad == 0);
  }
}

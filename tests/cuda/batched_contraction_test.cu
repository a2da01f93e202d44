// Batched contractions on the GPU: tpx::einsum on device tensors (cuBLASLt strided-batched GEMMs,
// the local transposes as a for_each_element kernel) against the same program on the host backend,
// whose own property test (tests/property/batched_contraction_test.cpp) checks it against a naive
// loop; and cuda::gemm_batched itself against a loop of host GEMMs, for every transpose pair,
// beta != 0 and a batch of one.
//
// The program runs on a 2x2 mesh of streams on one GPU (spmd(tpx::cuda_simulated, ...)) with
// extents that do not divide: attention's two products with B over X and H over Y (and with T, E
// split too, which gathers), two contracted dims whose common split leaves a partial sum, the
// issue's [I, J] x [J, I] (a transpose of the right operand), and heads stored after the sequence
// dim (both operands transposed). cuBLASLt and OpenBLAS sum in other orders, so results agree
// within k fp32 ulps of sum |a b|: 1e-5 relative here, with k <= 35. Skipped without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <tpx/cuda/cuda.hpp>
#include <tpx/tpx.hpp>
#include <vector>

#include "support/device_data.hpp"

namespace {

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, H, T, S, E, I, J, K, L);

std::vector<float> values(std::int64_t n, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[i] = tpx::kernels::normal_at(seed, static_cast<std::uint64_t>(i));
  return v;
}

struct outputs {
  std::vector<std::vector<float>> arrays;
};

template <class Launcher>
outputs run_contractions(Launcher launcher) {
  const std::int64_t nb = 3, nh = 5, nt = 7, ns = 6, ne = 5, ni = 5, nj = 7, nk = 3, nl = 4;
  const auto q = values(nb * nh * nt * ne, 1), k = values(nb * nh * ns * ne, 2);
  const auto p = values(nb * nh * nt * ns, 3), v = values(nb * nh * ns * ne, 4);
  const auto a3 = values(ni * nj * nk, 5), b3 = values(nj * nk * nl, 6);
  const auto x2 = values(ni * nj, 7), y2 = values(nj * ni, 8);
  const auto qt = values(nb * nt * nh * ne, 9), kt = values(nb * ns * nh * ne, 10);
  outputs out;
  tpx::spmd(launcher, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    using tpx::from_global;
    const auto qs = from_global<float, B<X>, H<Y>, T<>, E<>>(rank, {B(nb), H(nh), T(nt), E(ne)}, q);
    const auto ks = from_global<float, B<X>, H<Y>, S<>, E<>>(rank, {B(nb), H(nh), S(ns), E(ne)}, k);
    const auto ps = from_global<float, B<X>, H<Y>, T<>, S<>>(rank, {B(nb), H(nh), T(nt), S(ns)}, p);
    const auto vs = from_global<float, B<X>, H<Y>, S<>, E<>>(rank, {B(nb), H(nh), S(ns), E(ne)}, v);
    const auto qx = from_global<float, B<>, H<Y>, T<X>, E<>>(rank, {B(nb), H(nh), T(nt), E(ne)}, q);
    const auto kx = from_global<float, B<>, H<Y>, S<>, E<X>>(rank, {B(nb), H(nh), S(ns), E(ne)}, k);
    const auto as = from_global<float, I<X>, J<>, K<Y>>(rank, {I(ni), J(nj), K(nk)}, a3);
    const auto bs = from_global<float, J<X>, K<Y>, L<>>(rank, {J(nj), K(nk), L(nl)}, b3);
    const auto xs = from_global<float, I<Y>, J<X>>(rank, {I(ni), J(nj)}, x2);
    const auto ys = from_global<float, J<X>, I<Y>>(rank, {J(nj), I(ni)}, y2);
    const auto qts =
        from_global<float, B<X>, T<>, H<Y>, E<>>(rank, {B(nb), T(nt), H(nh), E(ne)}, qt);
    const auto kts =
        from_global<float, B<X>, S<>, H<Y>, E<>>(rank, {B(nb), S(ns), H(nh), E(ne)}, kt);
    std::vector<std::vector<float>> all = {
        tpx::to_global(tpx::einsum<E>(qs, ks)),     // [B_X, H_Y, T, S]
        tpx::to_global(tpx::einsum<S>(ps, vs)),     // [B_X, H_Y, T, E]
        tpx::to_global(tpx::einsum<E>(qx, kx)),     // gathers E on the right: [B, H_Y, T_X, S]
        tpx::to_global(tpx::einsum<J, K>(as, bs)),  // [I_X, L]{U_Y}, gathered J
        tpx::to_global(tpx::contract<J>(xs, ys)),   // [I_Y]{U_X}, right transposed
        tpx::to_global(tpx::einsum<E>(qts, kts)),   // both transposed to [B, H, ., E]
    };
    if (rank.world_rank() == 0) out.arrays = std::move(all);
  });
  return out;
}

// C_i = 1.5 op(A_i) op(B_i) + 0.5 C_i for i < batch, on the device and by host GEMMs.
void check_gemm_batched(tpx::cuda::rank_resources& gpu, bool ta, bool tb, std::int64_t batch) {
  CAPTURE(ta);
  CAPTURE(tb);
  CAPTURE(batch);
  namespace t = tpx::cuda::testing;
  const std::int64_t m = 13, n = 9, k = 17;
  const std::int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
  const std::int64_t sa = m * k + 3, sb = k * n + 1, sc = m * n + 2;  // gaps between matrices
  const auto a = t::random_values<float>(batch * sa, -1, 1, 1);
  const auto b = t::random_values<float>(batch * sb, -1, 1, 2);
  auto want = t::random_values<float>(batch * sc, -1, 1, 3);
  auto da = t::to_device(gpu, a), db = t::to_device(gpu, b), dc = t::to_device(gpu, want);
  for (std::int64_t i = 0; i < batch; ++i)
    tpx::kernels::gemm(ta, tb, m, n, k, 1.5f, a.data() + i * sa, lda, b.data() + i * sb, ldb, 0.5f,
                       want.data() + i * sc, ldc);
  tpx::cuda::gemm_batched(gpu.gemms(), gpu.stream(), ta, tb, m, n, k, 1.5f, da.data(), lda, sa,
                          db.data(), ldb, sb, 0.5f, dc.data(), ldc, sc, batch);
  const auto got = t::to_host(gpu, dc.data(), dc.size());
  // |a|, |b| <= 1: sum |a b| <= k, so k-term fp32 sums in two orders agree within 1e-4.
  CHECK(t::mismatches(got, want, 0.0, t::fp32_unit, 1e-4) == 0);
}

}  // namespace

TEST_CASE("gemm_batched equals a loop of host GEMMs for every transpose pair") {
  tpx::cuda::rank_resources gpu(0, {});
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (std::int64_t batch : {1, 4}) check_gemm_batched(gpu, ta, tb, batch);
}

TEST_CASE("einsum on device tensors equals einsum on the host") {
  const outputs host = run_contractions(tpx::host);
  const outputs device = run_contractions(tpx::cuda_simulated);
  REQUIRE(device.arrays.size() == host.arrays.size());
  for (std::size_t a = 0; a < host.arrays.size(); ++a) {
    CAPTURE(a);
    const auto& h = host.arrays[a];
    const auto& g = device.arrays[a];
    REQUIRE(g.size() == h.size());
    double scale = 0;
    for (float x : h) scale = std::max(scale, double(std::abs(x)));
    std::size_t bad = 0;
    for (std::size_t i = 0; i < h.size(); ++i)
      if (!(std::abs(double(g[i]) - h[i]) <= 1e-5 * scale)) ++bad;
    INFO(bad << " of " << h.size() << " elements differ by more than 1e-5 of " << scale);
    CHECK(bad == 0);
  }
}

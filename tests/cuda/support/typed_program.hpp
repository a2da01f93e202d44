// One typed tpx program, written once as a generic lambda over the rank, run under the host
// launcher and under a CUDA launcher; the CUDA results must equal the host's. This is the
// issue's promise checked directly: the code of the core issue runs unchanged on GPUs.
//
// The program makes In[B_X, D_Y] and W[D_X, F_Y] with tpx::randn (device tensors for a CUDA
// rank: the type follows the rank), multiplies them (matmul chooses the collectives), applies
// GELU and a bf16 cast (the elementwise kernel), reshards across both axes, gathers an inner dim
// (pack/unpack through copy_box), reduce-scatters a partial sum into an inner dim and rolls a
// dim's blocks one rank on (ops/roll.hpp). Extents do not divide the mesh, so blocks are uneven
// (but for the roll, whose blocks must be equal). Rank 0 records every result as a global array.
// GEMMs differ between cuBLASLt and OpenBLAS in summation order, so fp32 results agree within
// k ulps of the magnitudes and bf16 ones within a bf16 ulp.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <mutex>
#include <vector>

#include <tpx/cuda/cuda.hpp>

namespace tpx::cuda::testing {

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, D, F);

struct program_results {
  std::vector<std::vector<float>> arrays;
};

template <class Launcher>
program_results run_typed_program(Launcher launcher, int x, int y) {
  program_results results;
  std::mutex lock;
  spmd(launcher, Mesh<X, Y>{x, y}, [&](auto& rank) {
    std::vector<std::vector<float>> mine;
    const auto keep = [&](const auto& t) {
      const auto global = to_global(t);
      mine.emplace_back(global.begin(), global.end());
    };
    auto in = randn<float, B<X>, D<Y>>(rank, {B(7), D(10)}, 1);
    auto w = randn<float, D<X>, F<Y>>(rank, {D(10), F(13)}, 2, 0.5f);
    auto t = matmul(in, w);  // [B_X, F_Y]
    keep(t);
    auto g = map(kernels::gelu{}, t);
    keep(cast<bf16>(g));
    keep(reshard<B<Y>, F<X>>(g));             // both axes move: all_to_all / gathers
    auto in_d = all_gather<Y>(in);            // [B_X, D]: D is the inner dim, unpacked with copy_box
    keep(in_d);
    auto partial = contract<B>(in_d, t);      // [D, F_Y]{U_X}
    keep(reduce_scatter<X, F>(partial));      // [D, F_YX]: packed with copy_box
    auto rows = randn<float, B<X>, F<>>(rank, {B(3 * x), F(5)}, 3);
    keep(roll<X, B>(rows, 1));                // block r to rank r + 1: all_to_all, one peer each
    if (rank.world_rank() == 0) {
      const std::lock_guard guard(lock);
      results.arrays = std::move(mine);
    }
  });
  return results;
}

// The program on `launcher` equals the program on the host.
template <class Launcher>
void check_typed_program(Launcher launcher, int x, int y) {
  CAPTURE(x);
  CAPTURE(y);
  const program_results host_results = run_typed_program(tpx::host, x, y);
  const program_results device_results = run_typed_program(launcher, x, y);
  REQUIRE(device_results.arrays.size() == host_results.arrays.size());
  for (std::size_t a = 0; a < host_results.arrays.size(); ++a) {
    CAPTURE(a);
    const auto& want = host_results.arrays[a];
    const auto& got = device_results.arrays[a];
    REQUIRE(got.size() == want.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
      bad += !(std::abs(got[i] - want[i]) <= 1e-2 * std::abs(want[i]) + 1e-4);  // bf16 ulp; 10-term sums
    CHECK(bad == 0);
  }
}

}  // namespace tpx::cuda::testing

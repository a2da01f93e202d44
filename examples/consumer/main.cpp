// The program of the sample consumer project (see CMakeLists.txt beside it): a user's file with
// a few typed, sharded matmuls. Building and running it proves the include path and the link
// line that tpx::tpx hands to a user's project, and shows how long such a file takes to
// compile. It runs the notes' FSDP+TP layer forward on a 2x2 mesh of host threads and checks
// Out against the unsharded product.
#include <cmath>
#include <cstdio>

#include <tpx/tpx.hpp>

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, D, F);

int main() {
  float worst = 0;
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    auto in = tpx::randn<float, B<X>, D<Y>>(rank, {B(8), D(16)}, 1);     // In[B_X, D_Y]
    auto w_in = tpx::randn<float, D<X>, F<Y>>(rank, {D(16), F(32)}, 2);  // W_in[D_X, F_Y]
    auto w_out = tpx::randn<float, F<Y>, D<X>>(rank, {F(32), D(16)}, 3); // W_out[F_Y, D_X]
    auto tmp = tpx::matmul(in, w_in);                                    // [B_X, F_Y]
    auto out = tpx::matmul<B<X>, D<Y>>(tmp, tpx::all_gather<X>(w_out));  // ReduceScatter<Y>(D)
    // The same product on every rank, unsharded.
    auto in1 = tpx::to_global(in), w1 = tpx::to_global(w_in), w2 = tpx::to_global(w_out);
    auto got = tpx::to_global(out);
    for (int b = 0; b < 8; ++b)
      for (int d = 0; d < 16; ++d) {
        double want = 0;
        for (int f = 0; f < 32; ++f) {
          double t = 0;
          for (int k = 0; k < 16; ++k) t += in1[b * 16 + k] * w1[k * 32 + f];
          want += t * w2[f * 16 + d];
        }
        if (rank.world_rank() == 0)
          worst = std::max(worst, static_cast<float>(std::abs(want - got[b * 16 + d])));
      }
  });
  std::printf("tpx consumer: FSDP+TP layer on a 2x2 mesh, worst error vs unsharded %.2e\n", worst);
  return worst < 1e-3f ? 0 : 1;
}

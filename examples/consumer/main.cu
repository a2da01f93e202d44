// The CUDA program of the sample consumer project (CMakeLists.txt beside it, built with
// -DTPX_CONSUMER_CUDA=ON): main.cpp's FSDP+TP layer written once, as a generic function of the
// rank, and run on two 2x2 meshes, one of host threads and one simulated on a GPU
// (tpx::cuda_simulated: four ranks as streams of one device); the two outputs must agree.
// Building it proves what tpx::cuda hands to a user's .cu file: nvcc's flags, the CUDA runtime,
// cuBLASLt and NCCL. On a machine without a GPU it says so and exits with 77 ("skipped").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <tpx/cuda/cuda.hpp>

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, D, F);

// Out[B_X, D_Y] of the layer on a 2x2 mesh of `launcher`, as rank 0 sees it gathered.
template <class Launcher>
std::vector<float> layer(Launcher launcher) {
  std::vector<float> out;
  tpx::spmd(launcher, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    auto in = tpx::randn<float, B<X>, D<Y>>(rank, {B(8), D(16)}, 1);     // In[B_X, D_Y]
    auto w_in = tpx::randn<float, D<X>, F<Y>>(rank, {D(16), F(32)}, 2);  // W_in[D_X, F_Y]
    auto w_out = tpx::randn<float, F<Y>, D<X>>(rank, {F(32), D(16)}, 3); // W_out[F_Y, D_X]
    auto tmp = tpx::matmul(in, w_in);                                    // [B_X, F_Y]
    auto result = tpx::matmul(tmp, tpx::all_gather<X>(w_out));          // [B_X, D]{U_Y}
    const auto global = tpx::to_global(result);  // a collective: every rank calls it
    if (rank.world_rank() == 0) out.assign(global.begin(), global.end());
  });
  return out;
}

int main() {
  const tpx::cuda::device_census devices = tpx::cuda::find_devices();
  if (devices.count == 0) {
    std::printf("tpx consumer (CUDA): skipped: no CUDA device (%s)\n", devices.reason.c_str());
    return 77;
  }
  const std::vector<float> host = layer(tpx::host);
  const std::vector<float> gpu = layer(tpx::cuda_simulated);
  if (gpu.size() != host.size()) return 1;
  float worst = 0;  // relative to the value's size: cuBLASLt and OpenBLAS sum in other orders
  for (std::size_t i = 0; i < host.size(); ++i)
    worst = std::max(worst, std::abs(gpu[i] - host[i]) / (1 + std::abs(host[i])));
  std::printf("tpx consumer (CUDA): FSDP+TP layer on a 2x2 mesh on one GPU, worst difference "
              "vs the host mesh %.2e\n", worst);
  return worst < 1e-4f ? 0 : 1;
}

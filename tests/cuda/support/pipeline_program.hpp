// A pipeline (nn/pipeline.hpp) written once as a generic lambda over the rank, run under the host
// launcher and under a CUDA launcher; the CUDA run's weight gradients must equal the host's. The
// program is tests/unit/pipeline_test.cpp's residual stack x <- x + GELU(x W) with two layers per
// stage, stages over mesh axis X and FSDP plus data parallelism over Y, in GPipe's and 1F1B's
// orders: on the GPU the stages' blocks pass between ranks as device buffers, and every product
// runs on cuBLASLt, so results agree with OpenBLAS's within fp32 rounding of 8-term sums.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <mutex>
#include <optional>
#include <tpx/cuda/cuda.hpp>
#include <tpx/nn/pipeline.hpp>
#include <vector>

namespace tpx::cuda::testing::pipeline_case {

TPX_MESH_AXES(X, Y);
TPX_DIMS(S, B, D, E);

inline constexpr int per_stage = 2, microbatches = 3;
inline constexpr std::int64_t width = 8;

// Every weight gradient of the run, as global arrays ([S, D, E], layer s * per_stage + i in
// block s of array i), from rank 0.
template <class Launcher>
std::vector<std::vector<float>> run_pipeline_program(Launcher launcher, int stages, int data,
                                                     nn::pipeline_order order) {
  std::vector<std::vector<float>> results;
  std::mutex lock;
  spmd(launcher, Mesh<X, Y>{stages, data}, [&](auto& rank) {
    const auto rows = [&](std::uint64_t seed) {
      return randn<float, S<X>, B<Y>, D<>>(rank, {S(stages), B(2 * data), D(width)}, seed);
    };
    using rows_t = decltype(rows(0));
    using weight = decltype(randn<float, S<X>, D<Y>, E<>>(rank, {S(1), D(1), E(1)}, 0));
    std::vector<weight> ws, grads;
    for (int i = 0; i < per_stage; ++i) {
      ws.push_back(
          randn<float, S<X>, D<Y>, E<>>(rank, {S(stages), D(width), E(width)}, 10 + i, 0.3f));
      grads.emplace_back(rank, typename weight::shape_type{S(stages), D(width), E(width)});
    }
    using product_t = decltype(einsum<D>(std::declval<const rows_t&>(), all_gather<Y>(ws[0])));
    std::vector<std::vector<rows_t>> inputs(microbatches);
    std::vector<std::vector<product_t>> products(microbatches);
    std::vector<std::optional<rows_t>> outputs(microbatches);
    const int stage = rank.template axis<X>().coord;
    const bool last = stage == stages - 1;
    nn::run_pipeline<X, S>(
        rows(0), nn::pipeline_schedule(stages, microbatches, order),
        [&](int m, rows_t in) {
          rows_t x = stage == 0 ? rows(100 + m) : std::move(in);
          for (int i = 0; i < per_stage; ++i) {
            auto product = einsum<D>(x, all_gather<Y>(ws[i]));
            rows_t next = x + rename<E, D>(map(kernels::gelu{}, product));
            inputs[m].push_back(std::move(x));
            products[m].push_back(std::move(product));
            x = std::move(next);
          }
          if (last) outputs[m] = x;
          return x;
        },
        [&](int m, rows_t dout) {
          rows_t dx = last ? *outputs[m] - rows(200 + m) : std::move(dout);
          for (int i = per_stage - 1; i >= 0; --i) {
            const auto dpre = rename<D, E>(
                map(kernels::gelu_backward{}, rename<E, D>(std::move(products[m][i])), dx));
            grads[i] = grads[i] + reduce_scatter<Y, D>(einsum<B>(inputs[m][i], dpre));
            dx = dx + einsum<E>(dpre, all_gather<Y>(ws[i]));
          }
          return dx;
        });
    std::vector<std::vector<float>> mine;
    for (const weight& g : grads) mine.push_back(to_global(g));
    if (rank.world_rank() == 0) {
      const std::lock_guard guard(lock);
      results = std::move(mine);
    }
  });
  return results;
}

// The pipeline on `launcher` equals the pipeline on the host, in both orders.
template <class Launcher>
void check_pipeline_program(Launcher launcher, int stages, int data) {
  for (const nn::pipeline_order order :
       {nn::pipeline_order::gpipe, nn::pipeline_order::one_f_one_b}) {
    CAPTURE(stages);
    CAPTURE(data);
    CAPTURE(order == nn::pipeline_order::gpipe ? "gpipe" : "1f1b");
    const auto want = run_pipeline_program(tpx::host, stages, data, order);
    const auto got = run_pipeline_program(launcher, stages, data, order);
    REQUIRE(got.size() == want.size());
    for (std::size_t a = 0; a < want.size(); ++a) {
      REQUIRE(got[a].size() == want[a].size());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < want[a].size(); ++i)
        bad += !(std::abs(got[a][i] - want[a][i]) <= 1e-4 * std::abs(want[a][i]) + 1e-5);
      CHECK(bad == 0);
    }
  }
}

}  // namespace tpx::cuda::testing::pipeline_case

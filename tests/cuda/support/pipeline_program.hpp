// A pipeline (nn/pipeline.hpp) written once as a generic lambda over the rank, run under the host
// launcher and under a CUDA launcher; the CUDA run's weight gradients must equal the host's. The
// stage is examples/pipeline/residual_stack.hpp's residual stack x <- x + GELU(x W), two layers
// per stage, stages over mesh axis P and FSDP plus data parallelism over X, in GPipe's, 1F1B's,
// zero-bubble's, the interleaved and zero-bubble V's orders: on the GPU the stages' blocks pass
// between ranks as device buffers (in the step, or on each rank's second stream beside its
// kernels), and every product runs on cuBLASLt, so results agree with OpenBLAS's within fp32
// rounding of 8-term sums. The same for examples/pipeline/mlp_stage.hpp's
// stage, with Megatron's tensor parallelism over Y inside each stage (check_3d_pipeline_program).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <mutex>
#include <tpx/cuda/cuda.hpp>
#include <tpx/nn/pipeline.hpp>
#include <type_traits>
#include <vector>

#include "../../../examples/pipeline/mlp_stage.hpp"
#include "../../../examples/pipeline/residual_stack.hpp"

namespace tpx::cuda::testing::pipeline_case {

// The example's names, declared here so that they hide typed_program.hpp's X, B and D.
using pipeline_example::B;
using pipeline_example::D;
using pipeline_example::E;
using pipeline_example::P;
using pipeline_example::residual_stage;
using pipeline_example::S;
using pipeline_example::X;

inline constexpr int per_stage = 2, microbatches = 6;  // a multiple of every P here
inline constexpr std::int64_t width = 8;

// Every weight gradient of the run, as global arrays ([S, D, E]; array c per_stage + i holds,
// in block s, layer i of chunk c of stage s), from rank 0. Stage s holds plan.chunks() pieces of
// the stack (the plan says which: nn::pipeline_schedule::piece).
template <class Launcher>
std::vector<std::vector<float>> run_pipeline_program(
    Launcher launcher, int stages, int data, nn::pipeline_order order,
    nn::pipeline_passes passes = nn::pipeline_passes::in_step) {
  std::vector<std::vector<float>> results;
  std::mutex lock;
  const nn::pipeline_schedule plan(stages, microbatches, order,
                                   {.chunks = order == nn::pipeline_order::interleaved ? 2 : 1});
  const int chunks = plan.chunks();
  spmd(launcher, Mesh<P, X>{stages, data}, [&](auto& rank) {
    using stage_t = residual_stage<space_of_t<std::remove_cvref_t<decltype(rank)>>>;
    using rows = typename stage_t::rows;
    const auto random_rows = [&](std::uint64_t seed) {
      return randn<float, S<P>, B<X>, D<>>(rank, {S(stages), B(2 * data), D(width)}, seed);
    };
    std::vector<stage_t> pieces;
    for (int c = 0; c < chunks; ++c) {
      std::vector<typename stage_t::weight> weights;
      for (int i = 0; i < per_stage; ++i)
        weights.push_back(randn<float, S<P>, D<X>, E<>>(rank, {S(stages), D(width), E(width)},
                                                        10 + c * per_stage + i, 0.3f));
      pieces.emplace_back(rank, std::move(weights), plan, c);
      pieces.back().gather();
    }
    const bool first = rank.template axis<P>().coord == 0;
    const auto forward = [&](int m, int c, rows in) {
      return pieces[c].forward(m, first && c == 0 ? random_rows(100 + m) : std::move(in));
    };
    const auto backward = [&](int m, int c, rows dout) {
      stage_t& piece = pieces[c];
      return piece.backward(
          m, piece.last ? *piece.outputs[m] - random_rows(200 + m) : std::move(dout));
    };
    const auto weight = [&](int m, int c) { pieces[c].weight_gradient(m); };
    // In the background: on the rank's second stream.
    nn::run_pipeline<P, S>(random_rows(0), plan, passes, forward, backward, weight);
    std::vector<std::vector<float>> mine;
    for (stage_t& piece : pieces) {
      piece.release();
      for (const auto& g : piece.grads) mine.push_back(to_global(g));
    }
    if (rank.world_rank() == 0) {
      const std::lock_guard guard(lock);
      results = std::move(mine);
    }
  });
  return results;
}

inline constexpr nn::pipeline_order every_order[] = {
    nn::pipeline_order::gpipe, nn::pipeline_order::one_f_one_b, nn::pipeline_order::zero_bubble,
    nn::pipeline_order::interleaved, nn::pipeline_order::zero_bubble_v};

// Whether the gradients a run on a device gave equal the host run's, within fp32 rounding.
inline void check_equal_gradients(const std::vector<std::vector<float>>& got,
                                  const std::vector<std::vector<float>>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t a = 0; a < want.size(); ++a) {
    REQUIRE(got[a].size() == want[a].size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < want[a].size(); ++i)
      bad += !(std::abs(got[a][i] - want[a][i]) <= 1e-4 * std::abs(want[a][i]) + 1e-5);
    CHECK(bad == 0);
  }
}

// The pipeline on `launcher` equals the pipeline on the host, in every order (interleaved with
// two chunks per stage, as zero-bubble V always has), its passes in the step or in the background.
template <class Launcher>
void check_pipeline_program(Launcher launcher, int stages, int data) {
  for (const nn::pipeline_order order : every_order) {
    CAPTURE(stages);
    CAPTURE(data);
    CAPTURE(nn::order_name(order));
    const auto want = run_pipeline_program(tpx::host, stages, data, order);
    check_equal_gradients(run_pipeline_program(launcher, stages, data, order), want);
    check_equal_gradients(
        run_pipeline_program(launcher, stages, data, order, nn::pipeline_passes::in_background),
        want);
  }
}

}  // namespace tpx::cuda::testing::pipeline_case

namespace tpx::cuda::testing::pipeline_3d_case {

using pipeline_3d_example::B;
using pipeline_3d_example::D;
using pipeline_3d_example::F;
using pipeline_3d_example::mlp_stage;
using pipeline_3d_example::P;
using pipeline_3d_example::S;
using pipeline_3d_example::X;
using pipeline_3d_example::Y;

inline constexpr int per_piece = 2;
inline constexpr std::int64_t width = 8, hidden_width = 16;

// Every weight gradient (W_in's and W_out's of each block of each chunk) of the MLP blocks'
// pipeline on a P x X x Y mesh, as global arrays, from rank 0.
template <class Launcher>
std::vector<std::vector<float>> run_3d_pipeline_program(Launcher launcher, int stages, int data,
                                                        int tensor, nn::pipeline_order order) {
  std::vector<std::vector<float>> results;
  std::mutex lock;
  const int microbatches = 2 * stages;
  const nn::pipeline_schedule plan(stages, microbatches, order,
                                   {.chunks = order == nn::pipeline_order::interleaved ? 2 : 1});
  spmd(launcher, Mesh<P, X, Y>{stages, data, tensor}, [&](auto& rank) {
    using stage_t = mlp_stage<space_of_t<std::remove_cvref_t<decltype(rank)>>>;
    using rows = typename stage_t::rows;
    const auto random_rows = [&](std::uint64_t seed) {
      return randn<float, S<P>, B<X>, D<>>(rank, {S(stages), B(2 * data), D(width)}, seed);
    };
    std::vector<stage_t> pieces;
    for (int c = 0; c < plan.chunks(); ++c) {
      std::vector<typename stage_t::weight_in> ins;
      std::vector<typename stage_t::weight_out> outs;
      for (int i = 0; i < per_piece; ++i) {
        ins.push_back(randn<float, S<P>, D<X>, F<Y>>(rank, {S(stages), D(width), F(hidden_width)},
                                                     10 + 2 * (c * per_piece + i), 0.3f));
        outs.push_back(randn<float, S<P>, F<Y>, D<X>>(rank, {S(stages), F(hidden_width), D(width)},
                                                      11 + 2 * (c * per_piece + i), 0.2f));
      }
      pieces.emplace_back(rank, std::move(ins), std::move(outs), plan, c);
      pieces.back().gather();
    }
    const int stage = rank.template axis<P>().coord;
    nn::run_pipeline<P, S>(
        random_rows(0), plan,
        [&](int m, int c, rows in) {
          return pieces[c].forward(
              m, plan.piece(stage, c) == 0 ? random_rows(100 + m) : std::move(in));
        },
        [&](int m, int c, rows dout) {
          stage_t& piece = pieces[c];
          return piece.backward(
              m, piece.last ? *piece.outputs[m] - random_rows(200 + m) : std::move(dout));
        },
        [&](int m, int c) { pieces[c].weight_gradient(m); });
    std::vector<std::vector<float>> mine;
    for (stage_t& piece : pieces) {
      piece.release();
      for (std::size_t i = 0; i < piece.grad_in.size(); ++i) {
        mine.push_back(to_global(piece.grad_in[i]));
        mine.push_back(to_global(piece.grad_out[i]));
      }
    }
    if (rank.world_rank() == 0) {
      const std::lock_guard guard(lock);
      results = std::move(mine);
    }
  });
  return results;
}

// The MLP blocks' pipeline with tensor parallelism over Y on `launcher` equals the host's, in
// every order.
template <class Launcher>
void check_3d_pipeline_program(Launcher launcher, int stages, int data, int tensor) {
  for (const nn::pipeline_order order : pipeline_case::every_order) {
    CAPTURE(stages);
    CAPTURE(data);
    CAPTURE(tensor);
    CAPTURE(nn::order_name(order));
    pipeline_case::check_equal_gradients(
        run_3d_pipeline_program(launcher, stages, data, tensor, order),
        run_3d_pipeline_program(tpx::host, stages, data, tensor, order));
  }
}

}  // namespace tpx::cuda::testing::pipeline_3d_case

// Pipeline, FSDP and tensor parallelism at once (the seeds' three ways of cutting a model), against
// the model run whole on one thread by naive loops in double: L = 12 of the notes' MLP blocks
// x <- x + GELU(x W_in) W_out, W_in [D, F], W_out [F, D], loss 0.5 sum (x_L - y)^2 / N over N rows
// in M microbatches, trained through nn::run_pipeline over P with examples/pipeline/mlp_stage.hpp's
// stage: W_in split by columns and W_out by rows over Y (Megatron-LM's pair), both FSDP-sharded
// over X and all-gathered for the step, the rows split over X. On meshes P x X x Y = 1x1x1,
// 1x1x2, 2x1x2, 2x2x2, 3x1x2 and 2x2x1, in all five schedules (GPipe, 1F1B, zero-bubble,
// interleaved with two chunks, zero-bubble V), it checks:
//  - the last piece's outputs x_L of every microbatch (relative 1e-5);
//  - every layer's two weight gradients, reduce-scattered over X onto their shards, summed over
//    the microbatches (max |difference| / max |reference| within 1e-5);
//  - the traffic over Y: one all-reduce per block each way per microbatch (the forward's partial
//    outputs, the backward's partial input gradients), nothing else;
//  - the global norm that gradient clipping reads (nn::squared_norm of each stacked gradient,
//    reduced over P, X and Y, every axis that splits it): the whole model's, on every rank of every
//    stage (TorchTitan had to learn to reduce it over the pipeline too: pytorch/torchtitan#596);
// and, with a softmax cross-entropy head in place of the squared error (the last piece's output
// as logits over a vocabulary of D's extent, split over Y: nn::cross_entropy_per<S>, vocab
// parallel, on the loss's stage alone), the step's loss (relative 1e-5), summed over the
// microbatches and reduced over P once after the step, on every rank of every stage, and the same
// outputs and gradients; so the axes compose: a stage's ranks along X and Y run the same
// microbatch at the same tick and their collectives meet, whichever schedule orders the ticks,
// and also with the passes over P in the background (on each rank's communication thread, beside
// the stages' collectives over X and Y on the ranks' own threads), on 2x1x2, 2x2x2 and 3x1x2.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tpx/kernels/random.hpp>
#include <tpx/nn/cross_entropy.hpp>
#include <tpx/nn/global_norm.hpp>
#include <tpx/nn/pipeline.hpp>
#include <tpx/tpx.hpp>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../examples/pipeline/mlp_stage.hpp"
#include "../support/gelu_reference.hpp"

namespace {

using namespace pipeline_3d_example;  // P, X, Y, S, B, D, F and the stage
using tpx::nn::pipeline_order;

constexpr int layers = 12;
constexpr std::int64_t width = 8, hidden_width = 16;

// The loss at the end of the model: 0.5 sum (x_L - y)^2 / N, or the mean softmax cross-entropy
// of x_L's rows as logits over D, row r's target token_of(r).
enum class head { squared_error, cross_entropy };
std::int32_t token_of(std::int64_t row) { return static_cast<std::int32_t>((row * 5 + 3) % width); }

struct reference {
  double loss = 0;
  std::vector<double> outputs;                 // x_L, [N, D] row-major
  std::vector<std::vector<double>> grads_in;   // dW_in[l], [D, F]
  std::vector<std::vector<double>> grads_out;  // dW_out[l], [F, D]
};

// The model whole: naive loops in double over x [N, D], y [N, D], w_in[l] [D, F], w_out[l] [F, D].
reference run_whole(const std::vector<float>& x0, const std::vector<float>& y,
                    const std::vector<std::vector<float>>& w_in,
                    const std::vector<std::vector<float>>& w_out, std::int64_t n, head loss) {
  const std::int64_t d = width, f = hidden_width;
  std::vector<std::vector<double>> xs(layers + 1), pre(layers, std::vector<double>(n * f));
  xs[0].assign(x0.begin(), x0.end());
  for (int l = 0; l < layers; ++l) {
    xs[l + 1] = xs[l];
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t j = 0; j < f; ++j)
        for (std::int64_t i = 0; i < d; ++i)
          pre[l][r * f + j] += xs[l][r * d + i] * w_in[l][i * f + j];
      for (std::int64_t i = 0; i < d; ++i)
        for (std::int64_t j = 0; j < f; ++j)
          xs[l + 1][r * d + i] +=
              tpx::testing::gelu_reference(pre[l][r * f + j]) * w_out[l][j * d + i];
    }
  }
  reference out{0, xs[layers], std::vector<std::vector<double>>(layers, std::vector<double>(d * f)),
                std::vector<std::vector<double>>(layers, std::vector<double>(f * d))};
  std::vector<double> dy(n * d);
  for (std::int64_t r = 0; r < n; ++r) {
    const double* x = &xs[layers][r * d];
    if (loss == head::squared_error) {
      for (std::int64_t i = 0; i < d; ++i) {
        out.loss += 0.5 * (x[i] - y[r * d + i]) * (x[i] - y[r * d + i]) / static_cast<double>(n);
        dy[r * d + i] = (x[i] - y[r * d + i]) / static_cast<double>(n);
      }
    } else {
      double m = -INFINITY, sum = 0;
      for (std::int64_t i = 0; i < d; ++i) m = std::max(m, x[i]);
      for (std::int64_t i = 0; i < d; ++i) sum += std::exp(x[i] - m);
      out.loss += (m + std::log(sum) - x[token_of(r)]) / static_cast<double>(n);
      for (std::int64_t i = 0; i < d; ++i)
        dy[r * d + i] = (std::exp(x[i] - m) / sum - (i == token_of(r))) / static_cast<double>(n);
    }
  }
  for (int l = layers - 1; l >= 0; --l) {
    std::vector<double> dx = dy;
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t j = 0; j < f; ++j) {
        const double a = pre[l][r * f + j];
        double dg = 0;
        for (std::int64_t i = 0; i < d; ++i) {
          dg += dy[r * d + i] * w_out[l][j * d + i];
          out.grads_out[l][j * d + i] += tpx::testing::gelu_reference(a) * dy[r * d + i];
        }
        const double da = dg * tpx::testing::gelu_reference_slope(a);
        for (std::int64_t i = 0; i < d; ++i) {
          out.grads_in[l][i * f + j] += xs[l][r * d + i] * da;
          dx[r * d + i] += da * w_in[l][i * f + j];
        }
      }
    dy = std::move(dx);
  }
  return out;
}

double largest_difference(const float* got, const std::vector<double>& want) {
  double diff = 0;
  for (std::size_t k = 0; k < want.size(); ++k) diff = std::max(diff, std::abs(got[k] - want[k]));
  return diff;
}
double largest(const std::vector<double>& v) {
  double m = 0;
  for (const double e : v) m = std::max(m, std::abs(e));
  return m;
}

using tpx::nn::pipeline_passes;

void check_3d_pipeline(int stages, int data, int tensor, int microbatches, pipeline_order order,
                       pipeline_passes passes = pipeline_passes::in_step,
                       head loss = head::squared_error) {
  CAPTURE(loss == head::cross_entropy);
  CAPTURE(stages);
  CAPTURE(data);
  CAPTURE(tensor);
  CAPTURE(microbatches);
  CAPTURE(tpx::nn::order_name(order));
  CAPTURE(passes == pipeline_passes::in_background);
  const tpx::nn::pipeline_schedule plan(stages, microbatches, order,
                                        {.chunks = order == pipeline_order::interleaved ? 2 : 1});
  const int chunks = plan.chunks(), per_piece = layers / plan.pieces();
  const std::int64_t rows = 2 * data, n = rows * microbatches;
  std::vector<float> x0(n * width), y(n * width);
  for (std::int64_t k = 0; k < n * width; ++k) {
    x0[k] = tpx::kernels::normal_at(1, static_cast<std::uint64_t>(k));
    y[k] = tpx::kernels::normal_at(2, static_cast<std::uint64_t>(k));
  }
  std::vector<std::vector<float>> w_in(layers, std::vector<float>(width * hidden_width)),
      w_out(layers, std::vector<float>(hidden_width * width));
  for (int l = 0; l < layers; ++l)
    for (std::int64_t k = 0; k < width * hidden_width; ++k) {
      w_in[l][k] = 0.3f * tpx::kernels::normal_at(10 + l, static_cast<std::uint64_t>(k));
      w_out[l][k] = 0.2f * tpx::kernels::normal_at(40 + l, static_cast<std::uint64_t>(k));
    }
  const reference whole = run_whole(x0, y, w_in, w_out, n, loss);
  std::vector<std::int32_t> tokens(n);
  for (std::int64_t r = 0; r < n; ++r) tokens[r] = token_of(r);
  double whole_squares = 0;
  for (int l = 0; l < layers; ++l)
    for (const std::vector<double>* g : {&whole.grads_in[l], &whole.grads_out[l]})
      for (const double e : *g) whole_squares += e * e;
  // Layer i of chunk c of stage s: dealt round the stages, or in the V.
  const auto layer_of = [&](int c, int s, int i) {
    const int piece =
        order == pipeline_order::zero_bubble_v ? (c == 0 ? s : 2 * stages - 1 - s) : c * stages + s;
    return piece * per_piece + i;
  };

  tpx::spmd(tpx::host, tpx::Mesh<P, X, Y>{stages, data, tensor}, [&](auto& rank) {
    using stage_t = mlp_stage<tpx::space_of_t<std::remove_cvref_t<decltype(rank)>>>;
    using rows_t = typename stage_t::rows;
    const int stage = rank.template axis<P>().coord;
    // Block s of a stacked tensor: stage s's copy of `all[layer_of(c, s, i)]`, or of rows.
    const auto stacked = [&](const auto& pick) {
      std::vector<float> g;
      for (int s = 0; s < stages; ++s) {
        const std::vector<float>& block = pick(s);
        g.insert(g.end(), block.begin(), block.end());
      }
      return g;
    };
    const auto microbatch = [&](const std::vector<float>& all, int m) {
      const std::vector<float> mine(all.begin() + m * rows * width,
                                    all.begin() + (m + 1) * rows * width);
      return tpx::from_global<float, S<P>, B<X>, D<>>(
          rank, {S(stages), B(rows), D(width)}, stacked([&](int) -> const auto& { return mine; }));
    };
    // Microbatch m's targets, [S_P, B_X, 1], every stage's block the same.
    const auto targets = [&](int m) {
      std::vector<std::int32_t> all;
      for (int s = 0; s < stages; ++s)
        all.insert(all.end(), tokens.begin() + m * rows, tokens.begin() + (m + 1) * rows);
      return tpx::from_global<std::int32_t, S<P>, B<X>, D<>>(rank, {S(stages), B(rows), D(1)}, all);
    };
    // The microbatches' losses, summed on the loss's stage (the last piece's); 0 elsewhere.
    auto step_loss =
        tpx::from_global<float, S<P>>(rank, {S(stages)}, std::vector<float>(stages, 0.0f));
    // The gradient of the model's output for microbatch m, from the loss, on the loss's stage.
    const auto output_gradient = [&](int m, const rows_t& out) -> rows_t {
      if (loss == head::squared_error)
        return (out - microbatch(y, m)) * (1.0 / static_cast<double>(n));
      // Logits over a vocabulary of D's extent, split over Y: a local slice, no communication.
      auto ce = tpx::nn::cross_entropy_per<S>(tpx::slice<Y, D>(out), targets(m), 0,
                                              1.0f / static_cast<float>(microbatches));
      step_loss = step_loss + ce.loss;
      return tpx::all_gather<Y>(std::move(ce.dlogits));
    };
    std::vector<stage_t> pieces;  // by chunk
    for (int c = 0; c < chunks; ++c) {
      std::vector<typename stage_t::weight_in> ins;
      std::vector<typename stage_t::weight_out> outs;
      for (int i = 0; i < per_piece; ++i) {
        ins.push_back(tpx::from_global<float, S<P>, D<X>, F<Y>>(
            rank, {S(stages), D(width), F(hidden_width)},
            stacked([&](int s) -> const auto& { return w_in[layer_of(c, s, i)]; })));
        outs.push_back(tpx::from_global<float, S<P>, F<Y>, D<X>>(
            rank, {S(stages), F(hidden_width), D(width)},
            stacked([&](int s) -> const auto& { return w_out[layer_of(c, s, i)]; })));
      }
      pieces.emplace_back(rank, std::move(ins), std::move(outs), plan, c);
    }
    std::vector<std::vector<float>> output_blocks(microbatches);
    const auto over_y = [&] {
      return rank.traffic_by_axes()[4].of(tpx::detail::CollectiveOp::all_reduce).calls;
    };
    const std::int64_t over_y_before = over_y();
    for (stage_t& piece : pieces) piece.gather();
    tpx::nn::run_pipeline<P, S>(
        rows_t(rank, {S(stages), B(rows), D(width)}), plan, passes,
        [&](int m, int c, rows_t in) {
          rows_t out =
              pieces[c].forward(m, plan.piece(stage, c) == 0 ? microbatch(x0, m) : std::move(in));
          if (pieces[c].last) {
            const auto block = out.local();
            output_blocks[m].assign(block.begin(), block.end());
          }
          return out;
        },
        [&](int m, int c, rows_t dout) {
          stage_t& piece = pieces[c];
          return piece.backward(
              m, piece.last ? output_gradient(m, *piece.outputs[m]) : std::move(dout));
        },
        [&](int m, int c) { pieces[c].weight_gradient(m); });
    for (stage_t& piece : pieces) piece.release();

    // One all-reduce over Y per block each way per microbatch (none on a single rank); the loss's
    // stage adds the cross-entropy's three (the rows' max, sum of exponentials, target logit).
    const bool loss_stage =
        std::any_of(pieces.begin(), pieces.end(), [](const stage_t& p) { return p.last; });
    const int loss_reductions = loss == head::cross_entropy && loss_stage ? 3 : 0;
    CHECK(over_y() - over_y_before ==
          (tensor > 1 ? (2 * chunks * per_piece + loss_reductions) * microbatches : 0));
    // The step's loss, reduced over P once: every rank of every stage has it.
    const tpx::Tensor<float> logged = tpx::all_reduce<P>(tpx::sum<S>(step_loss));
    if (loss == head::cross_entropy)
      CHECK(logged.local()[0] == doctest::Approx(whole.loss).epsilon(1e-5));
    for (const stage_t& piece : pieces)
      if (piece.last)
        for (int m = 0; m < microbatches; ++m) {
          const std::int64_t first_row = m * rows + rank.template axis<X>().coord * (rows / data);
          for (std::size_t k = 0; k < output_blocks[m].size(); ++k)
            CHECK(output_blocks[m][k] ==
                  doctest::Approx(whole.outputs[first_row * width + k]).epsilon(1e-5));
        }
    double squares = 0;
    for (const stage_t& piece : pieces)
      for (int i = 0; i < per_piece; ++i)
        squares += tpx::nn::squared_norm(piece.grad_in[i]).local()[0] +
                   tpx::nn::squared_norm(piece.grad_out[i]).local()[0];
    CHECK(squares == doctest::Approx(whole_squares).epsilon(1e-5));
    for (int c = 0; c < chunks; ++c)
      for (int i = 0; i < per_piece; ++i) {
        const std::vector<float> g_in = tpx::to_global(pieces[c].grad_in[i]);
        const std::vector<float> g_out = tpx::to_global(pieces[c].grad_out[i]);
        for (int s = 0; s < stages; ++s) {
          const int l = layer_of(c, s, i);
          CAPTURE(l);
          const std::int64_t block = width * hidden_width;
          CHECK(largest_difference(g_in.data() + s * block, whole.grads_in[l]) <=
                1e-5 * largest(whole.grads_in[l]));
          CHECK(largest_difference(g_out.data() + s * block, whole.grads_out[l]) <=
                1e-5 * largest(whole.grads_out[l]));
        }
      }
  });
}

constexpr pipeline_order every_order[] = {pipeline_order::gpipe, pipeline_order::one_f_one_b,
                                          pipeline_order::zero_bubble, pipeline_order::interleaved,
                                          pipeline_order::zero_bubble_v};

TEST_CASE(
    "a pipeline over P with FSDP over X and Megatron's tensor parallelism over Y matches "
    "the whole model in every schedule") {
  for (const pipeline_order order : every_order)
    for (const auto& [stages, data, tensor] :
         {std::tuple{1, 1, 1}, {1, 1, 2}, {2, 1, 2}, {2, 2, 2}, {3, 1, 2}, {2, 2, 1}}) {
      check_3d_pipeline(stages, data, tensor, 2 * stages, order);
      if (order != pipeline_order::interleaved) check_3d_pipeline(stages, data, tensor, 1, order);
    }
}

TEST_CASE(
    "a cross-entropy head on the loss's stage alone, vocab parallel over Y, gives the whole "
    "model's loss and gradients in every schedule") {
  for (const pipeline_order order : every_order)
    for (const auto& [stages, data, tensor] :
         {std::tuple{1, 1, 1}, {2, 2, 2}, {3, 1, 2}, {2, 1, 2}})
      check_3d_pipeline(stages, data, tensor, 2 * stages, order, pipeline_passes::in_step,
                        head::cross_entropy);
  check_3d_pipeline(3, 1, 2, 6, pipeline_order::zero_bubble_v, pipeline_passes::in_background,
                    head::cross_entropy);
}

TEST_CASE(
    "the same with the passes over P in the background, beside the stages' collectives over "
    "X and Y") {
  for (const pipeline_order order : every_order)
    for (const auto& [stages, data, tensor] : {std::tuple{2, 1, 2}, {2, 2, 2}, {3, 1, 2}})
      check_3d_pipeline(stages, data, tensor, 2 * stages, order, pipeline_passes::in_background);
}

}  // namespace

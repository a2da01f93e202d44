// Pipeline parallelism (nn/pipeline.hpp) against the same model run whole on one thread by naive
// loops in double: a residual stack of L = 12 layers x <- x + GELU(x W_l), W_l [D, D], loss 0.5 sum
// (x_L - y)^2 / N over a batch of N rows in M microbatches, trained through run_pipeline over mesh
// axis P (12 / P layers per stage, each stage's weights stacked as [S_P, D_X, E] and all-gathered
// over X before use, FSDP) with data parallelism over X inside each stage (rows [S_P, B_X, D]). In
// the three orders GPipe (with the backward and weight gradient in one function), 1F1B and
// zero-bubble (with them in two), on meshes P x X = 1x1, 2x1, 3x1, 4x1, 2x2, 3x2 and 1, 2 and 5
// microbatches, and in the interleaved order (2 or 3 chunks of 12 / (P v) layers per stage, the
// functions taking the chunk) on meshes 1x1 to 4x1, 2x2 and 3x2 with P and 2P microbatches, and in
// the zero-bubble V order (two chunks per stage in a V, 12 / (2 P) layers each) on meshes 1x1 to
// 3x1, 6x1, 2x2 and 3x2 with 1, 2 and 5 microbatches, and in every order with the passes in the
// background (on each rank's communication thread) on meshes up to 3x1 and 2x2, it checks:
//  - the last piece's outputs x_L of every microbatch, block by block (relative 1e-5);
//  - every layer's weight gradient, reduce-scattered over X onto its FSDP shard, summed over the
//    microbatches (max |difference| / max |reference| within 1e-5: fp32 sums in another order);
//  - that each stage ran each (microbatch, chunk) once each way and once through its weight
//    step, in order, holding no more at once than the schedule says, and sent over P each
//    microbatch's activation on and its gradient back once per boundary between pieces of the
//    stack on different stages, nothing more (its traffic).
// Then each stage's peak tensor memory, measured by the rank's meter, is lower under 1F1B and
// zero-bubble than under GPipe (P = 4, M = 8); the schedules for P up to 5 and M up to 7 keep their
// definitions (each step once, after the step it needs; GPipe's diagram; 1F1B's bound; 2 (M +
// P - 1) ticks and the bubble (P - 1) / (M + P - 1); zero-bubble's 3 M + 2 (P - 1) - min(extra,
// P - 1, M - 1) ticks and P - s + extra in flight; interleaved's 2 (v M + P - 1) ticks and
// Megatron-LM's 2 (P - 1 - s) + (v - 1) P + 1 in flight; for P up to 6, zero-bubble V's pieces in
// its V, at least 6 M + P - 1 ticks and exactly that for P <= 4 and M >= P, at most 2 P + extra
// chunks in flight, the last stage's turn no pass); a stage that throws mid-step stops every
// stage, named, in every order and both places of the passes; a dry run reads every rank's
// peak memory and traffic of the real run; a stage dim of the wrong extent, a schedule for
// another number of stages, a zero-bubble schedule without a weight function, an interleaved one
// with functions that do not take the chunk, options an order does not take, no microbatch, or a
// stage function whose block for the next piece has other extents than `like`, are refused with
// a sentence.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tpx/kernels/random.hpp>
#include <tpx/nn/pipeline.hpp>
#include <tpx/spmd/dry_run.hpp>
#include <tpx/tpx.hpp>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../examples/pipeline/residual_stack.hpp"
#include "../support/gelu_reference.hpp"
#include "../support/message_of.hpp"

namespace {

using namespace pipeline_example;  // P, X, S, B, D, E and the stack's stage

using tpx::Tensor;

constexpr int layers = 12;
constexpr std::int64_t width = 8;

// The model whole, in double: GELU's tanh form written out (not kernels::gelu's exp form).
using tpx::testing::gelu_reference;
using tpx::testing::gelu_reference_slope;

struct reference {
  std::vector<std::vector<double>> outputs;  // x_L, [N, D] row-major (all microbatches)
  std::vector<std::vector<double>> grads;    // dW_l, [D, D]
};

// x [N, D], y [N, D], w[l] [D, D]: forward, then the loss's gradients, naive loops.
reference run_whole(const std::vector<float>& x0, const std::vector<float>& y,
                    const std::vector<std::vector<float>>& w, std::int64_t n) {
  const std::int64_t d = width;
  std::vector<std::vector<double>> xs(layers + 1, std::vector<double>(x0.begin(), x0.end()));
  std::vector<std::vector<double>> pre(layers, std::vector<double>(n * d));
  for (int l = 0; l < layers; ++l)
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t j = 0; j < d; ++j) {
        double s = 0;
        for (std::int64_t i = 0; i < d; ++i) s += xs[l][r * d + i] * w[l][i * d + j];
        pre[l][r * d + j] = s;
        xs[l + 1][r * d + j] = xs[l][r * d + j] + gelu_reference(s);
      }
  reference out{{xs[layers]}, std::vector<std::vector<double>>(layers, std::vector<double>(d * d))};
  std::vector<double> dx(n * d);
  for (std::int64_t k = 0; k < n * d; ++k) dx[k] = (xs[layers][k] - y[k]) / static_cast<double>(n);
  for (int l = layers - 1; l >= 0; --l) {
    std::vector<double> dpre(n * d), next = dx;
    for (std::int64_t k = 0; k < n * d; ++k) dpre[k] = dx[k] * gelu_reference_slope(pre[l][k]);
    for (std::int64_t i = 0; i < d; ++i)
      for (std::int64_t j = 0; j < d; ++j)
        for (std::int64_t r = 0; r < n; ++r) {
          out.grads[l][i * d + j] += xs[l][r * d + i] * dpre[r * d + j];
          next[r * d + i] += dpre[r * d + j] * w[l][i * d + j];
        }
    dx = std::move(next);
  }
  return out;
}

double largest(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::abs(e));
  return m;
}

using tpx::nn::pipeline_order;
using tpx::nn::pipeline_step;

constexpr pipeline_order every_order[] = {pipeline_order::gpipe, pipeline_order::one_f_one_b,
                                          pipeline_order::zero_bubble};

// The piece of the stack that chunk c of stage s runs, of `chunks` per stage: dealt round the
// stages (c P + s), or in zero-bubble V's V (s down, then 2 P - 1 - s back up).
int piece_of(pipeline_order order, int stages, int c, int s) {
  if (order == pipeline_order::zero_bubble_v) return c == 0 ? s : 2 * stages - 1 - s;
  return c * stages + s;
}

// Runs the stack through the pipeline on a P x X mesh and checks it against the model run whole;
// returns each stage's peak tensor memory during the run (rank 0 of X's). Under the interleaved
// and zero-bubble V schedules each stage holds v chunks (a residual_stage each): chunk c of stage
// s is piece piece_of(order, P, c, s) of the stack's v P pieces.
using tpx::nn::pipeline_passes;

std::vector<std::int64_t> check_pipeline(int stages, int data, int microbatches,
                                         pipeline_order order,
                                         tpx::nn::pipeline_options options = {},
                                         pipeline_passes passes = pipeline_passes::in_step) {
  CAPTURE(stages);
  CAPTURE(data);
  CAPTURE(microbatches);
  CAPTURE(tpx::nn::order_name(order));
  CAPTURE(options.chunks);
  CAPTURE(options.extra_in_flight);
  CAPTURE(passes == pipeline_passes::in_background);
  const tpx::nn::pipeline_schedule plan(stages, microbatches, order, options);
  const int chunks = plan.chunks(), per_piece = layers / (stages * chunks);
  const std::int64_t rows = 2 * data;  // a microbatch's rows, split over X
  const std::int64_t n = rows * microbatches;
  std::vector<float> x0(n * width), y(n * width);
  for (std::int64_t k = 0; k < n * width; ++k) {
    x0[k] = tpx::kernels::normal_at(1, static_cast<std::uint64_t>(k));
    y[k] = tpx::kernels::normal_at(2, static_cast<std::uint64_t>(k));
  }
  std::vector<std::vector<float>> w(layers, std::vector<float>(width * width));
  for (int l = 0; l < layers; ++l)
    for (std::int64_t k = 0; k < width * width; ++k)
      w[l][k] = 0.3f * tpx::kernels::normal_at(10 + l, static_cast<std::uint64_t>(k));
  const reference whole = run_whole(x0, y, w, n);
  // Layer i of chunk c of stage s.
  const auto layer_of = [&](int c, int s, int i) {
    return piece_of(order, stages, c, s) * per_piece + i;
  };
  std::vector<std::int64_t> peaks(stages);
  std::mutex peaks_lock;

  tpx::spmd(tpx::host, tpx::Mesh<P, X>{stages, data}, [&](auto& rank) {
    using stage_t = residual_stage<tpx::space_of_t<std::remove_cvref_t<decltype(rank)>>>;
    using rows_t = typename stage_t::rows;
    // Microbatch m's rows (inputs or targets) in every stage's block; stage 0 reads the inputs,
    // the last stage the targets.
    const auto microbatch = [&](const std::vector<float>& all, int m) {
      std::vector<float> g;
      for (int s = 0; s < stages; ++s)
        g.insert(g.end(), all.begin() + m * rows * width, all.begin() + (m + 1) * rows * width);
      return tpx::from_global<float, S<P>, B<X>, D<>>(rank, {S(stages), B(rows), D(width)}, g);
    };
    std::vector<stage_t> pieces;  // by chunk
    for (int c = 0; c < chunks; ++c) {
      std::vector<typename stage_t::weight> weights;
      for (int i = 0; i < per_piece; ++i) {
        std::vector<float> g;  // block s: stage s's layer
        for (int s = 0; s < stages; ++s)
          g.insert(g.end(), w[layer_of(c, s, i)].begin(), w[layer_of(c, s, i)].end());
        weights.push_back(
            tpx::from_global<float, S<P>, D<X>, E<>>(rank, {S(stages), D(width), E(width)}, g));
      }
      pieces.emplace_back(rank, std::move(weights), plan, c);
    }
    std::vector<std::vector<float>> output_blocks(microbatches);
    const int stage = rank.template axis<P>().coord;
    // (microbatch, chunk) in the order each kind of step ran them
    std::vector<std::pair<int, int>> forward_order, backward_order, weight_order;
    int held = 0, most_held = 0;

    const rows_t like(rank, {S(stages), B(rows), D(width)});
    const auto passed_bytes = [&] {  // this rank's all_to_all data over P: what it sent
      return rank.traffic_by_axes()[1].of(tpx::detail::CollectiveOp::all_to_all).data_bytes;
    };
    const double passed_before = passed_bytes();
    rank.memory().reset_peak();
    for (stage_t& piece : pieces) piece.gather();
    const auto forward = [&](int m, int c, rows_t in) {
      forward_order.emplace_back(m, c);
      most_held = std::max(most_held, ++held);
      rows_t out = pieces[c].forward(m, stage == 0 && c == 0 ? microbatch(x0, m) : std::move(in));
      if (pieces[c].last) {
        const auto block = out.local();
        output_blocks[m].assign(block.begin(), block.end());
      }
      return out;
    };
    const auto backward = [&](int m, int c, rows_t dout) {
      backward_order.emplace_back(m, c);
      return pieces[c].backward(m, pieces[c].last ? (*pieces[c].outputs[m] - microbatch(y, m)) *
                                                        (1.0 / static_cast<double>(n))
                                                  : std::move(dout));
    };
    const auto weight = [&](int m, int c) {
      weight_order.emplace_back(m, c);
      --held;
      pieces[c].weight_gradient(m);
    };
    if (order == pipeline_order::gpipe)  // functions without the chunk; one backward for both
      tpx::nn::run_pipeline<P, S>(
          like, plan, passes, [&](int m, rows_t in) { return forward(m, 0, std::move(in)); },
          [&](int m, rows_t dout) {
            rows_t din = backward(m, 0, std::move(dout));
            weight(m, 0);
            return din;
          });
    else
      tpx::nn::run_pipeline<P, S>(like, plan, passes, forward, backward, weight);
    for (stage_t& piece : pieces) piece.release();
    if (rank.template axis<X>().coord == 0) {
      const std::lock_guard guard(peaks_lock);
      peaks[stage] = rank.memory().peak_bytes();
    }

    // Each (microbatch, chunk) once each way and once through its weight step, each chunk's
    // microbatches in order, and no more kept at once than the schedule says.
    for (const auto* ran : {&forward_order, &backward_order, &weight_order}) {
      CHECK(ran->size() == static_cast<std::size_t>(microbatches * chunks));
      for (int c = 0; c < chunks; ++c) {
        std::vector<int> of_chunk;
        for (const auto& [m, chunk] : *ran)
          if (chunk == c) of_chunk.push_back(m);
        std::vector<int> in_order(microbatches);
        for (int m = 0; m < microbatches; ++m) in_order[m] = m;
        CHECK(of_chunk == in_order);
      }
    }
    CHECK(held == 0);
    CHECK(most_held == plan.most_in_flight(stage));
    // Each microbatch's activation sent on, and its gradient back, once per boundary between
    // pieces on different stages: nothing else moves over P (the last piece's outputs and the
    // first's input gradients stay, and so do blocks between chunks of one stage: V's turn on
    // the last stage, a one-stage pipeline's chunks).
    const double block_bytes = static_cast<double>(like.size() * sizeof(float));
    const int boundaries = stages == 1 ? 0
                           : order == pipeline_order::zero_bubble_v
                               ? 4 - 2 * (stage == 0) - 2 * (stage == stages - 1)
                               : 2 * chunks - (stage == stages - 1) - (stage == 0);
    CHECK(passed_bytes() - passed_before == block_bytes * microbatches * boundaries);

    // The last stage's outputs, its block of every microbatch's rows.
    if (pieces.back().last)
      for (int m = 0; m < microbatches; ++m) {
        const std::int64_t first_row = m * rows + like.local_offset(1);
        for (std::int64_t r = 0; r < like.local_extent(1); ++r)
          for (std::int64_t j = 0; j < width; ++j)
            CHECK(output_blocks[m][r * width + j] ==
                  doctest::Approx(whole.outputs[0][(first_row + r) * width + j]).epsilon(1e-5));
      }
    // Every layer's gradient: layer_of(c, s, i) is block s of chunk c's grads[i].
    for (int c = 0; c < chunks; ++c)
      for (int i = 0; i < per_piece; ++i) {
        const std::vector<float> g = tpx::to_global(pieces[c].grads[i]);
        for (int s = 0; s < stages; ++s) {
          const int l = layer_of(c, s, i);
          CAPTURE(l);
          const std::vector<double>& want = whole.grads[l];
          double diff = 0;
          for (std::int64_t k = 0; k < width * width; ++k)
            diff = std::max(diff, std::abs(g[s * width * width + k] - want[k]));
          CHECK(diff <= 1e-5 * largest(want));
        }
      }
  });
  return peaks;
}

TEST_CASE("a pipeline over P matches the whole model's outputs and gradients, with FSDP over X") {
  for (const pipeline_order order : every_order)
    for (const auto& [stages, data] : {std::pair{1, 1}, {2, 1}, {3, 1}, {4, 1}, {2, 2}, {3, 2}})
      for (int microbatches : {1, 2, 5}) check_pipeline(stages, data, microbatches, order);
  // Zero-bubble with more microbatches in flight than 1F1B's bound.
  for (const int extra : {1, 3})
    check_pipeline(4, 1, 5, pipeline_order::zero_bubble, {.extra_in_flight = extra});
  // Interleaved: v chunks per stage, M a multiple of P (P = 1 keeps its blocks).
  for (const auto& [stages, data, chunks] :
       {std::tuple{1, 1, 2}, {2, 1, 2}, {2, 1, 3}, {3, 1, 2}, {4, 1, 3}, {2, 2, 2}, {3, 2, 2}})
    for (int microbatches : {stages, 2 * stages})
      check_pipeline(stages, data, microbatches, pipeline_order::interleaved, {.chunks = chunks});
  // Zero-bubble V: two chunks per stage, 12 / (2 P) layers each; and more in flight.
  for (const auto& [stages, data] : {std::pair{1, 1}, {2, 1}, {3, 1}, {6, 1}, {2, 2}, {3, 2}})
    for (int microbatches : {1, 2, 5}) {
      check_pipeline(stages, data, microbatches, pipeline_order::zero_bubble_v);
      check_pipeline(stages, data, microbatches, pipeline_order::zero_bubble_v,
                     {.extra_in_flight = 2});
    }
}

TEST_CASE("the passes in the background, on each rank's communication thread: the same results") {
  for (const pipeline_order order : every_order)
    for (const auto& [stages, data] : {std::pair{1, 1}, {2, 1}, {3, 1}, {2, 2}})
      for (int microbatches : {1, 4})
        check_pipeline(stages, data, microbatches, order, {}, pipeline_passes::in_background);
  for (const auto& [stages, data] : {std::pair{2, 1}, {3, 2}})
    check_pipeline(stages, data, 2 * stages, pipeline_order::interleaved, {.chunks = 2},
                   pipeline_passes::in_background);
  for (const auto& [stages, data] : {std::pair{2, 1}, {3, 1}, {2, 2}})
    check_pipeline(stages, data, 5, pipeline_order::zero_bubble_v, {},
                   pipeline_passes::in_background);
}

// A stage that throws in the middle of a step, in a forward or a backward step of microbatch 1,
// stops every stage: spmd throws naming that rank and its error long before the collective
// timeout, though the other stages are waiting for its passes over P (in their step, or on their
// communication threads).
TEST_CASE("a stage that throws mid-step stops every stage, named, long before the timeout") {
  constexpr int stages = 4, microbatches = 4;
  for (const pipeline_order order :
       {pipeline_order::gpipe, pipeline_order::one_f_one_b, pipeline_order::zero_bubble,
        pipeline_order::interleaved, pipeline_order::zero_bubble_v})
    for (const pipeline_passes passes : {pipeline_passes::in_step, pipeline_passes::in_background})
      for (const int failing : {0, stages - 1})
        for (const bool in_forward : {true, false}) {
          CAPTURE(tpx::nn::order_name(order));
          CAPTURE(passes == pipeline_passes::in_background);
          CAPTURE(failing);
          CAPTURE(in_forward);
          const tpx::nn::pipeline_schedule plan(
              stages, microbatches, order,
              {.chunks = order == pipeline_order::interleaved ? 2 : 1});
          const auto start = std::chrono::steady_clock::now();
          const std::string what = message_of([&] {
            tpx::spmd(
                tpx::host, tpx::Mesh<P, X>{stages, 1},
                [&](auto& rank) {
                  using rows_t = Tensor<float, S<P>, B<>, D<>>;
                  const rows_t like(rank, {S(stages), B(2), D(2)});
                  const bool faulty = rank.template axis<P>().coord == failing;
                  const auto step = [&](bool forward, int m) {
                    if (faulty && forward == in_forward && m == 1)
                      throw std::runtime_error("stage fault");
                  };
                  const auto forward = [&](int m, int, rows_t in) {
                    step(true, m);
                    return in;
                  };
                  const auto backward = [&](int m, int, rows_t dout) {
                    step(false, m);
                    return dout;
                  };
                  if (plan.splits_backward())
                    tpx::nn::run_pipeline<P, S>(like, plan, passes, forward, backward,
                                                [](int, int) {});
                  else
                    tpx::nn::run_pipeline<P, S>(like, plan, passes, forward, backward);
                },
                {.timeout = std::chrono::seconds(60)});
          });
          CHECK(what == "tpx: rank " + std::to_string(failing) + " (P=" +
                            std::to_string(failing) + ", X=0) failed: stage fault");
          CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
        }
}

TEST_CASE("1F1B and zero-bubble keep fewer activations than GPipe: measured peak of each stage") {
  const std::vector<std::int64_t> gpipe = check_pipeline(4, 1, 8, pipeline_order::gpipe);
  const std::vector<std::int64_t> one_f_one_b =
      check_pipeline(4, 1, 8, pipeline_order::one_f_one_b);
  const std::vector<std::int64_t> zero_bubble =
      check_pipeline(4, 1, 8, pipeline_order::zero_bubble);
  std::string peaks = "peak tensor bytes of stages 0-3, P = 4, M = 8, GPipe / 1F1B / zero-bubble:";
  for (int s = 0; s < 4; ++s) {
    CAPTURE(s);
    CHECK(one_f_one_b[s] < gpipe[s]);
    CHECK(zero_bubble[s] < gpipe[s]);
    peaks += "  " + std::to_string(gpipe[s]) + " / " + std::to_string(one_f_one_b[s]) + " / " +
             std::to_string(zero_bubble[s]);
  }
  MESSAGE(peaks);
}

// What one rank of the stack's pipeline holds and sends: its peak tensor memory and the data
// bytes of its collectives over P and over X.
struct rank_usage {
  std::int64_t peak_bytes = 0;
  double over_p = 0, over_x = 0;
  friend bool operator==(const rank_usage&, const rank_usage&) = default;
};

template <class Launcher>
std::vector<rank_usage> usage_of(Launcher launcher, int stages, int data, int microbatches,
                                 pipeline_order order, tpx::nn::pipeline_options options = {}) {
  const tpx::nn::pipeline_schedule plan(stages, microbatches, order, options);
  const int chunks = plan.chunks();
  std::vector<rank_usage> usage(stages * data);
  std::mutex lock;
  tpx::spmd(launcher, tpx::Mesh<P, X>{stages, data}, [&](auto& rank) {
    using stage_t = residual_stage<tpx::space_of_t<std::remove_cvref_t<decltype(rank)>>>;
    using rows_t = typename stage_t::rows;
    const std::int64_t rows = 2 * data;
    std::vector<stage_t> pieces;  // by chunk
    for (int c = 0; c < chunks; ++c) {
      std::vector<typename stage_t::weight> weights;
      for (int i = 0; i < layers / (stages * chunks); ++i)
        weights.push_back(tpx::randn<float, S<P>, D<X>, E<>>(rank, {S(stages), D(width), E(width)},
                                                             10 + 20 * c + i, 0.3f));
      pieces.emplace_back(rank, std::move(weights), plan, c);
    }
    const bool first = rank.template axis<P>().coord == 0;
    const rows_t like(rank, {S(stages), B(rows), D(width)});
    const auto data_bytes = [&](std::size_t axes) {
      return rank.traffic_by_axes()[axes].total().data_bytes;
    };
    const double p_before = data_bytes(1), x_before = data_bytes(2);
    rank.memory().reset_peak();
    for (stage_t& piece : pieces) piece.gather();
    tpx::nn::run_pipeline<P, S>(
        like, plan,
        [&](int m, int c, rows_t in) {
          return pieces[c].forward(m, first && c == 0
                                          ? tpx::randn<float, S<P>, B<X>, D<>>(
                                                rank, {S(stages), B(rows), D(width)}, 100 + m)
                                          : std::move(in));
        },
        [&](int m, int c, rows_t dout) {  // the loss 0.5 |x_L|^2: its gradient is x_L
          stage_t& piece = pieces[c];
          return piece.backward(m, piece.last ? *piece.outputs[m] * 1.0f : std::move(dout));
        },
        [&](int m, int c) { pieces[c].weight_gradient(m); });
    for (stage_t& piece : pieces) piece.release();
    const std::lock_guard guard(lock);
    usage[rank.world_rank()] = {rank.memory().peak_bytes(), data_bytes(1) - p_before,
                                data_bytes(2) - x_before};
  });
  return usage;
}

TEST_CASE("a dry run of a pipeline reads each rank's peak memory and traffic of the real run") {
  for (const pipeline_order order : every_order)
    for (const auto& [stages, data] : {std::pair{2, 1}, {3, 2}, {4, 1}})
      for (int microbatches : {1, 3}) {
        CAPTURE(stages);
        CAPTURE(data);
        CAPTURE(microbatches);
        const std::vector<rank_usage> dry =
            usage_of(tpx::dry_run, stages, data, microbatches, order);
        const std::vector<rank_usage> real = usage_of(tpx::host, stages, data, microbatches, order);
        CHECK(dry == real);
        CHECK(real[0].over_p > 0);
      }
  for (const pipeline_order order : {pipeline_order::interleaved, pipeline_order::zero_bubble_v})
    for (const auto& [stages, data] : {std::pair{2, 1}, {3, 2}}) {  // two chunks
      CAPTURE(tpx::nn::order_name(order));
      CAPTURE(stages);
      CAPTURE(data);
      const tpx::nn::pipeline_options two{.chunks = order == pipeline_order::interleaved ? 2 : 1};
      const auto dry = usage_of(tpx::dry_run, stages, data, stages, order, two);
      const auto real = usage_of(tpx::host, stages, data, stages, order, two);
      CHECK(dry == real);
      CHECK(real[0].over_p > 0);
    }
}

// The tick of stage s at which microbatch m runs `what` through `chunk`, -1 if none; checks it
// runs once.
int tick_of(const tpx::nn::pipeline_schedule& plan, int s, pipeline_step::kind what, int m,
            int chunk = 0) {
  int found = -1, times = 0;
  for (int t = 0; t < plan.ticks(); ++t)
    if (plan.at(s, t) == pipeline_step{what, m, chunk}) {
      found = t;
      ++times;
    }
  CHECK(times == 1);
  return found;
}

// Checks that stage s runs microbatch m forward once, after the previous stage, and backward
// once, after its forward and the next stage's backward; returns the two ticks.
std::pair<int, int> check_order_of_passes(const tpx::nn::pipeline_schedule& plan, int s, int m) {
  const int f = tick_of(plan, s, pipeline_step::forward, m);
  const int b = tick_of(plan, s, pipeline_step::backward, m);
  CHECK(f < b);
  if (s > 0) CHECK(tick_of(plan, s - 1, pipeline_step::forward, m) < f);
  if (s < plan.stages() - 1) CHECK(tick_of(plan, s + 1, pipeline_step::backward, m) < b);
  return {f, b};
}

TEST_CASE("the schedules: GPipe's diagram, 1F1B's bound, both taking 2 (M + P - 1) ticks") {
  for (const pipeline_order order : {pipeline_order::gpipe, pipeline_order::one_f_one_b})
    for (int stages = 1; stages <= 5; ++stages)
      for (int microbatches = 1; microbatches <= 7; ++microbatches) {
        CAPTURE(stages);
        CAPTURE(microbatches);
        const tpx::nn::pipeline_schedule plan(stages, microbatches, order);
        const int ticks = 2 * (microbatches + stages - 1);
        CHECK_FALSE(plan.splits_backward());
        CHECK(plan.ticks() == ticks);
        CHECK(plan.bubble() == doctest::Approx(double(stages - 1) / (microbatches + stages - 1)));
        for (int s = 0; s < stages; ++s) {
          CAPTURE(s);
          for (int m = 0; m < microbatches; ++m) {
            CAPTURE(m);
            const auto [f, b] = check_order_of_passes(plan, s, m);
            if (order == pipeline_order::gpipe) {
              CHECK(f == s + m);
              CHECK(b == microbatches + stages - 1 + (stages - 1 - s) + m);
            }
          }
          CHECK(
              plan.most_in_flight(s) ==
              (order == pipeline_order::gpipe ? microbatches : std::min(stages - s, microbatches)));
        }
      }
}

TEST_CASE("interleaved: 2 (v M + P - 1) ticks of a chunk each, Megatron-LM's warm-up in flight") {
  for (int stages = 1; stages <= 5; ++stages)
    for (int chunks = 2; chunks <= 3; ++chunks)
      for (int microbatches = stages; microbatches <= 2 * stages; microbatches += stages) {
        CAPTURE(stages);
        CAPTURE(chunks);
        CAPTURE(microbatches);
        const tpx::nn::pipeline_schedule plan(stages, microbatches, pipeline_order::interleaved,
                                              {.chunks = chunks});
        const int ticks = 2 * (chunks * microbatches + stages - 1);
        CHECK(plan.ticks() == ticks);
        CHECK(plan.bubble() ==
              doctest::Approx(double(stages - 1) / (chunks * microbatches + stages - 1)));
        const int pieces = chunks * stages;
        for (int s = 0; s < stages; ++s) {
          CAPTURE(s);
          for (int c = 0; c < chunks; ++c)
            for (int m = 0; m < microbatches; ++m) {
              CAPTURE(c);
              CAPTURE(m);
              // Piece c P + s after the piece before it (on the previous stage, or the last
              // stage's previous chunk), and back.
              const int piece = c * stages + s;
              const int f = tick_of(plan, s, pipeline_step::forward, m, c);
              const int b = tick_of(plan, s, pipeline_step::backward, m, c);
              CHECK(f < b);
              if (piece > 0)
                CHECK(tick_of(plan, (piece - 1) % stages, pipeline_step::forward, m,
                              (piece - 1) / stages) < f);
              if (piece < pieces - 1)
                CHECK(tick_of(plan, (piece + 1) % stages, pipeline_step::backward, m,
                              (piece + 1) / stages) < b);
            }
          CHECK(plan.most_in_flight(s) ==
                std::min(2 * (stages - 1 - s) + (chunks - 1) * stages + 1, chunks * microbatches));
        }
      }
}

// Counted by hand from the schedule's steps, not by its own most_in_flight.
int microbatches_kept(const tpx::nn::pipeline_schedule& plan, int s) {
  int kept = 0, most = 0;
  for (int t = 0; t < plan.ticks(); ++t) {
    if (plan.at(s, t).what == pipeline_step::forward) most = std::max(most, ++kept);
    if (plan.at(s, t).what == pipeline_step::weight) --kept;
  }
  return most;
}

TEST_CASE(
    "zero-bubble: 3 M + 2 (P - 1) - min(extra, P - 1, M - 1) ticks, P - s + extra in flight") {
  for (int stages = 1; stages <= 5; ++stages)
    for (int microbatches = 1; microbatches <= 7; ++microbatches)
      for (int extra = 0; extra <= stages; ++extra) {
        CAPTURE(stages);
        CAPTURE(microbatches);
        CAPTURE(extra);
        const tpx::nn::pipeline_schedule plan(stages, microbatches, pipeline_order::zero_bubble,
                                              {.extra_in_flight = extra});
        const int ticks =
            3 * microbatches + 2 * (stages - 1) - std::min({extra, stages - 1, microbatches - 1});
        CHECK(plan.splits_backward());
        CHECK(plan.ticks() == ticks);
        CHECK(plan.bubble() == doctest::Approx(double(ticks - 3 * microbatches) / ticks));
        for (int s = 0; s < stages; ++s) {
          CAPTURE(s);
          for (int m = 0; m < microbatches; ++m) {
            CAPTURE(m);
            const int b = check_order_of_passes(plan, s, m).second;
            CHECK(b < tick_of(plan, s, pipeline_step::weight, m));
          }
          const int kept = std::min(stages - s + extra, microbatches);
          CHECK(microbatches_kept(plan, s) == kept);
          CHECK(plan.most_in_flight(s) == kept);
        }
        // With 1F1B's memory, two thirds of 1F1B's bubble of 3 (P - 1) forward-times.
        if (extra == 0 && microbatches >= stages)
          CHECK(plan.ticks() - 3 * microbatches == 2 * (stages - 1));
      }
}

TEST_CASE(
    "zero-bubble V: each piece after the one it needs, 6 M + P - 1 ticks at least, and "
    "then exactly for P <= 4, 2 P + extra in flight") {
  for (int stages = 1; stages <= 6; ++stages)
    for (int microbatches = 1; microbatches <= 10; ++microbatches)
      for (int extra = 0; extra <= 2; ++extra) {
        CAPTURE(stages);
        CAPTURE(microbatches);
        CAPTURE(extra);
        const tpx::nn::pipeline_schedule plan(stages, microbatches, pipeline_order::zero_bubble_v,
                                              {.extra_in_flight = extra});
        CHECK(plan.splits_backward());
        CHECK(plan.chunks() == 2);
        // Piece k runs on stage k going down and on stage 2 P - 1 - k coming back up.
        const auto stage_of = [&](int k) { return k < stages ? k : 2 * stages - 1 - k; };
        const auto chunk_of = [&](int k) { return k < stages ? 0 : 1; };
        for (int k = 0; k < 2 * stages; ++k)
          for (int m = 0; m < microbatches; ++m) {
            CAPTURE(k);
            CAPTURE(m);
            const int s = stage_of(k), c = chunk_of(k);
            const int f = tick_of(plan, s, pipeline_step::forward, m, c);
            const int b = tick_of(plan, s, pipeline_step::backward, m, c);
            CHECK(f < b);
            CHECK(b < tick_of(plan, s, pipeline_step::weight, m, c));
            if (k > 0)
              CHECK(tick_of(plan, stage_of(k - 1), pipeline_step::forward, m, chunk_of(k - 1)) < f);
            if (k < 2 * stages - 1)
              CHECK(tick_of(plan, stage_of(k + 1), pipeline_step::backward, m, chunk_of(k + 1)) <
                    b);
            // The turn on the last stage, from piece P - 1 to piece P, is not a pass.
            if (k == stages - 1) {
              CHECK(plan.receiver(s, f) == s);
              CHECK_FALSE(plan.passes(s, f));
            }
          }
        // Each tick runs one chunk's F, B or W: 6 M of them per stage, and the last stage
        // cannot start before tick P - 1.
        const int least = 6 * microbatches + stages - 1;
        CHECK(plan.ticks() >= least);
        if (stages <= 4 && microbatches >= stages && extra == 0) CHECK(plan.ticks() == least);
        CHECK(plan.bubble() ==
              doctest::Approx(double(plan.ticks() - 6 * microbatches) / plan.ticks()));
        int most = 0;
        for (int s = 0; s < stages; ++s) {
          CAPTURE(s);
          CHECK(microbatches_kept(plan, s) == plan.most_in_flight(s));
          CHECK(plan.most_in_flight(s) <= 2 * stages + extra);
          most = std::max(most, plan.most_in_flight(s));
        }
        CHECK(most == std::min(2 * stages + extra, 2 * microbatches));
      }
  // With 1F1B's memory, a quarter of zero-bubble's bubble (ticks of half a stage's work).
  const tpx::nn::pipeline_schedule v(4, 8, pipeline_order::zero_bubble_v),
      zb(4, 8, pipeline_order::zero_bubble);
  CHECK(2 * (v.ticks() - 6 * 8) == zb.ticks() - 3 * 8);
}

TEST_CASE("a stage dim without one element per stage is refused, naming dim, axis and extents") {
  tpx::spmd(tpx::host, tpx::Mesh<P, X>{2, 1}, [](auto& rank) {
    using rows_t = Tensor<float, S<P>, B<>, D<>>;
    const rows_t like(rank, {S(4), B(2), D(2)});
    const auto same = [](int, rows_t r) { return r; };
    const auto run = [&](int stages) {
      tpx::nn::run_pipeline<P, S>(like, tpx::nn::pipeline_schedule(stages, 2), same, same);
    };
    CHECK_THROWS_WITH_AS(run(2),
                         "tpx: pipeline<P, S>: stage dim S of [S_P, B, D] has extent 4 but mesh "
                         "axis P has 2 stages: give it one element per stage",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(run(3),
                         "tpx: pipeline<P, S>: a schedule of 3 stages on mesh axis P of 2 ranks",
                         std::invalid_argument);
  });
}

TEST_CASE("a schedule's diagram: GPipe's and 1F1B's as their definitions place the steps") {
  using tpx::nn::pipeline_schedule;
  CHECK(pipeline_schedule(2, 2).diagram() ==
        "stage 0: F0 F1 .  .  B0 B1\n"
        "stage 1: .  F0 F1 B0 B1 .\n");
  CHECK(pipeline_schedule(2, 3, pipeline_order::one_f_one_b).diagram() ==
        "stage 0: F0 F1 .  B0 F2 B1 .  B2\n"
        "stage 1: .  F0 B0 F1 B1 F2 B2 .\n");
  const std::string interleaved =
      pipeline_schedule(2, 2, pipeline_order::interleaved, {.chunks = 2}).diagram();
  CHECK(interleaved.starts_with("stage 0: F0/0 F1/0 F0/1 F1/1 "));
  // V: the last stage turns microbatch 0 round at once (chunk 1 after chunk 0).
  const std::string v = pipeline_schedule(2, 2, pipeline_order::zero_bubble_v).diagram();
  CHECK(v.find("\nstage 1: .    F0/0 F0/1 ") != std::string::npos);
  const std::string eleven = pipeline_schedule(11, 1).diagram();
  CHECK(eleven.starts_with("stage 0:  F0 .  "));
  CHECK(eleven.find("\nstage 10: .  .  .  .  .  .  .  .  .  .  F0 B0") != std::string::npos);
}

TEST_CASE(
    "a block of other extents than like's is refused, naming the function, microbatch, "
    "chunk, stage and extents") {
  // Kept on the stage (zero-bubble V's turn on a one-stage pipeline): no pass involved.
  tpx::spmd(tpx::host, tpx::Mesh<P, X>{1, 1}, [](auto& rank) {
    using rows_t = Tensor<float, S<P>, B<>, D<>>;
    const rows_t like(rank, {S(1), B(2), D(2)});
    const auto longer = [&](int, int, rows_t) { return rows_t(rank, {S(1), B(3), D(2)}); };
    const auto weight = [](int, int) {};
    const auto run = [&] {
      const tpx::nn::pipeline_schedule plan(1, 2, pipeline_order::zero_bubble_v);
      tpx::nn::run_pipeline<P, S>(like, plan, longer, longer, weight);
    };
    CHECK_THROWS_WITH_AS(
        run(),
        "tpx: pipeline<P, S>: forward(m = 0, chunk 0) on stage 0 returned extents [1, 3, 2] where "
        "`like` has [1, 2, 2]: every block passed between pieces of the model has the extents of "
        "`like`",
        std::invalid_argument);
  });
  // Passed to the next stage: the stage that made it fails the run before it passes.
  const std::string what = message_of([] {
    tpx::spmd(tpx::host, tpx::Mesh<P, X>{2, 1}, [](auto& rank) {
      using rows_t = Tensor<float, S<P>, B<>, D<>>;
      const rows_t like(rank, {S(2), B(2), D(2)});
      const auto wider = [&](int, rows_t) { return rows_t(rank, {S(2), B(2), D(4)}); };
      tpx::nn::run_pipeline<P, S>(like, tpx::nn::pipeline_schedule(2, 1), wider, wider);
    });
  });
  CHECK(what ==
        "tpx: rank 0 (P=0, X=0) failed: tpx: pipeline<P, S>: forward(m = 0) on stage 0 returned "
        "extents [2, 2, 4] where `like` has [2, 2, 2]: every block passed between pieces of the "
        "model has the extents of `like`");
}

TEST_CASE("a zero-bubble schedule needs a weight function") {
  tpx::spmd(tpx::host, tpx::Mesh<P, X>{2, 1}, [](auto& rank) {
    using rows_t = Tensor<float, S<P>, B<>, D<>>;
    const rows_t like(rank, {S(2), B(2), D(2)});
    const auto same = [](int, rows_t r) { return r; };
    const auto run = [&] {
      const tpx::nn::pipeline_schedule plan(2, 2, pipeline_order::zero_bubble);
      tpx::nn::run_pipeline<P, S>(like, plan, same, same);
    };
    CHECK_THROWS_WITH_AS(
        run(),
        "tpx: pipeline<P, S>: a zero-bubble schedule splits each backward into the input gradient "
        "and the weight gradient: give run_pipeline a weight(m) function after backward",
        std::invalid_argument);
  });
}

TEST_CASE("an interleaved schedule needs functions that take the chunk") {
  tpx::spmd(tpx::host, tpx::Mesh<P, X>{2, 1}, [](auto& rank) {
    using rows_t = Tensor<float, S<P>, B<>, D<>>;
    const rows_t like(rank, {S(2), B(2), D(2)});
    const auto same = [](int, rows_t r) { return r; };
    const auto run = [&] {
      const tpx::nn::pipeline_schedule plan(2, 2, pipeline_order::interleaved, {.chunks = 2});
      tpx::nn::run_pipeline<P, S>(like, plan, same, same);
    };
    CHECK_THROWS_WITH_AS(
        run(),
        "tpx: pipeline<P, S>: the interleaved schedule runs 2 chunks of layers per "
        "stage: give each function the chunk, forward(m, chunk, in), "
        "backward(m, chunk, dout), weight(m, chunk)",
        std::invalid_argument);
  });
}

TEST_CASE("a schedule takes at least one stage and one microbatch, and its order's options") {
  using tpx::nn::pipeline_schedule;
  CHECK_THROWS_WITH_AS(
      pipeline_schedule(2, 0),
      "tpx: pipeline schedule of 2 stages and 0 microbatches: it takes at least one of each",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      pipeline_schedule(2, 4, pipeline_order::one_f_one_b, {.extra_in_flight = 1}),
      "tpx: pipeline schedule of 2 stages and 4 microbatches: 1 extra microbatches in flight: "
      "only the zero-bubble orders take extra ones (0 or more)",
      std::invalid_argument);
  CHECK_THROWS_AS(pipeline_schedule(2, 4, pipeline_order::zero_bubble, {.extra_in_flight = -1}),
                  std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      pipeline_schedule(2, 4, pipeline_order::one_f_one_b, {.chunks = 2}),
      "tpx: pipeline schedule of 2 stages and 4 microbatches: 2 chunks per stage: only the "
      "interleaved order takes more than one",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      pipeline_schedule(2, 4, pipeline_order::zero_bubble_v, {.chunks = 3}),
      "tpx: pipeline schedule of 2 stages and 4 microbatches: 3 chunks per stage: only the "
      "interleaved order takes more than one (zero-bubble V always runs two)",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(pipeline_schedule(2, 4, pipeline_order::interleaved),
                       "tpx: pipeline schedule of 2 stages and 4 microbatches: interleaved with 1 "
                       "chunks per stage: give 2 or more (with 1, one_f_one_b)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      pipeline_schedule(2, 3, pipeline_order::interleaved, {.chunks = 2}),
      "tpx: pipeline schedule of 2 stages and 3 microbatches: interleaved needs the microbatches "
      "to be a multiple of the stages",
      std::invalid_argument);
}

}  // namespace

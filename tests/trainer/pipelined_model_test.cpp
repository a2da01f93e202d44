// The example trainer's model cut into pipeline stages (examples/trainer/pipelined_model.hpp)
// against the same model on one rank (model.hpp on mesh 1x1, whose gradients
// gradient_check_test checks against finite differences): one step of the same batch, from the
// same initial weights, gives the same mean loss (relative 1e-5) and the same gradient of every
// weight (max |difference| within 1e-5 of the largest |gradient| of that weight), each stacked
// block against its layer, the embedding on the first piece's stage and the head on the last
// piece's. On meshes P x X x Y of 2x1x1, 2x2x2 (FSDP over X and tensor parallelism over Y inside
// each stage, uneven shards) and 4x1x1, in GPipe, 1F1B, zero-bubble, interleaved (two chunks per
// stage) and zero-bubble V (embedding and loss both on stage 0), with 4 microbatches; also with
// the passes over P (and FSDP's collectives) in the background. And FSDP's collectives over X:
// one all-gather and one reduce-scatter per step of each weight a stage uses, none of those it
// does not, in background tasks exactly when the passes are.
#include "../../examples/trainer/pipelined_model.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "../../examples/trainer/mlp_family.hpp"
#include "../../examples/trainer/run_options.hpp"

namespace {

using namespace trainer;
using tpx::nn::pipeline_order;

config small() {
  config c;
  c.batch = 16;
  c.d_model = 10;  // uneven over X = 2 after Y = 2
  c.ffn = 12;
  c.layers = 8;
  c.context = 2;
  return c;
}

struct step_values {
  float loss = 0;
  std::map<std::string, std::vector<float>> grads;  // by the whole model's names
};

// One step of the whole model on one rank.
step_values whole_step(const config& c, const text_data& data) {
  step_values out;
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) {
    model_tensors p(rank, c), grads(rank, c);
    initialize(p, c);
    const model<float> net(rank, c);
    out.loss = tpx::scalar_on_host(
        net.forward_backward(p, load_batch<tpx::host_space>(rank, data, c, 0), grads));
    grads.for_each(
        [&](const std::string& name, const auto& g) { out.grads[name] = tpx::to_global(g); });
  });
  return out;
}

// Block s of a stacked tensor's global values.
std::vector<float> block_of(const std::vector<float>& stacked, int stages, int s) {
  const std::size_t block = stacked.size() / static_cast<std::size_t>(stages);
  return {stacked.begin() + s * block, stacked.begin() + (s + 1) * block};
}

void check_pipelined_step(const config& c, const text_data& data, const step_values& whole,
                          int stages, int mx, int my, pipeline_order order,
                          tpx::nn::pipeline_passes passes = tpx::nn::pipeline_passes::in_step) {
  CAPTURE(stages);
  CAPTURE(mx);
  CAPTURE(my);
  CAPTURE(tpx::nn::order_name(order));
  const int microbatches = 4;
  const tpx::nn::pipeline_schedule plan(stages, microbatches, order,
                                        {.chunks = order == pipeline_order::interleaved ? 2 : 1});
  const int per_piece = blocks_per_piece(c, plan.pieces());
  std::vector<float> losses;
  step_values got;  // rank 0's view of every stage's gradients, by the whole model's names
  std::mutex lock;
  tpx::spmd(tpx::host, tpx::Mesh<P, X, Y>{stages, mx, my}, [&](auto& rank) {
    pipelined_tensors<tpx::host_space> p(rank, c, plan), grads(rank, c, plan);
    initialize(p, c, plan);
    const pipelined_model<float> net(rank, c, plan, passes);
    const float loss = tpx::scalar_on_host(net.forward_backward(
        p, load_microbatches<tpx::host_space>(rank, data, c, 0, microbatches), grads));
    std::map<std::string, std::vector<float>> named;
    for (int chunk = 0; chunk < plan.chunks(); ++chunk) {
      const auto& g = grads.chunks[chunk];
      for (int s = 0; s < stages; ++s) {
        const int piece = plan.piece(s, chunk);
        for (int i = 0; i < per_piece; ++i) {
          const std::string block = "block." + std::to_string(piece * per_piece + i) + ".";
          named[block + "norm"] = block_of(tpx::to_global(g.norm[i]), stages, s);
          named[block + "w_in"] = block_of(tpx::to_global(g.w_in[i]), stages, s);
          named[block + "w_out"] = block_of(tpx::to_global(g.w_out[i]), stages, s);
        }
        if (piece == 0)
          for (int k = 0; k < c.context; ++k)
            named["embed." + std::to_string(k)] = block_of(tpx::to_global(g.embed[k]), stages, s);
        if (piece == plan.pieces() - 1) {
          named["final_norm"] = block_of(tpx::to_global(g.final_norm), stages, s);
          named["head"] = block_of(tpx::to_global(g.head), stages, s);
        }
      }
    }
    const std::lock_guard<std::mutex> guard(lock);
    losses.push_back(loss);
    if (rank.world_rank() == 0) got.grads = std::move(named);
  });
  for (const float loss : losses) CHECK(loss == doctest::Approx(whole.loss).epsilon(1e-5));
  REQUIRE(got.grads.size() == whole.grads.size());
  for (const auto& [name, want] : whole.grads) {
    CAPTURE(name);
    const std::vector<float>& have = got.grads[name];
    REQUIRE(have.size() == want.size());
    float largest = 0, difference = 0;
    for (std::size_t k = 0; k < want.size(); ++k) {
      largest = std::max(largest, std::abs(want[k]));
      difference = std::max(difference, std::abs(have[k] - want[k]));
    }
    CHECK(largest > 0);
    CHECK(difference <= 1e-5f * largest);
  }
}

constexpr pipeline_order every_order[] = {pipeline_order::gpipe, pipeline_order::one_f_one_b,
                                          pipeline_order::zero_bubble, pipeline_order::interleaved,
                                          pipeline_order::zero_bubble_v};

TEST_CASE("the trainer's model cut into pipeline stages takes the whole model's step") {
  const config c = small();
  const text_data data(run_options<mlp>{}.text, c.context);
  const step_values whole = whole_step(c, data);
  for (const pipeline_order order : every_order)
    for (const auto& mesh : {std::tuple{2, 1, 1}, {2, 2, 2}, {4, 1, 1}}) {
      // plain variables, not bindings: clang before 16 cannot capture bindings in lambdas
      const int stages = std::get<0>(mesh), mx = std::get<1>(mesh), my = std::get<2>(mesh);
      check_pipelined_step(c, data, whole, stages, mx, my, order);
    }
  check_pipelined_step(c, data, whole, 2, 2, 2, pipeline_order::zero_bubble_v,
                       tpx::nn::pipeline_passes::in_background);
}

// FSDP's collectives once per step: each weight a stage's chunks use is all-gathered over X once
// and its gradient reduce-scattered once, whatever the microbatches; the embedding's context
// tables only where a chunk is the first piece, the final norm and head only where one is the
// last, so a stage gathers 3 per block of its chunks, plus those. With the passes in the
// background (--overlap on) all of them are background tasks' traffic; without, none is.
TEST_CASE("a pipeline stage gathers each weight it uses once per step, and no other") {
  const config c = small();
  const text_data data(run_options<mlp>{}.text, c.context);
  using tpx::nn::pipeline_passes;
  for (const pipeline_order order : {pipeline_order::one_f_one_b, pipeline_order::zero_bubble_v})
    for (const pipeline_passes passes :
         {pipeline_passes::in_step, pipeline_passes::in_background}) {
      CAPTURE(tpx::nn::order_name(order));
      const bool overlap = passes == pipeline_passes::in_background;
      CAPTURE(overlap);
      const tpx::nn::pipeline_schedule plan(2, 4, order);
      const int per_piece = blocks_per_piece(c, plan.pieces());
      struct counts {
        int stage;
        std::int64_t weights, gathers, scatters, background_gathers, background_scatters;
      };
      std::vector<counts> ranks;
      std::mutex lock;
      tpx::spmd(tpx::host, tpx::Mesh<P, X, Y>{2, 2, 1}, [&](auto& rank) {
        pipelined_tensors<tpx::host_space> p(rank, c, plan), grads(rank, c, plan);
        initialize(p, c, plan);
        const pipelined_model<float> net(rank, c, plan, passes);
        net.forward_backward(p, load_microbatches<tpx::host_space>(rank, data, c, 0, 4), grads);
        const int stage = rank.template axis<P>().coord;
        counts n{stage, 0, -1, -1, 0, 0};
        for (int chunk = 0; chunk < plan.chunks(); ++chunk) {
          const int piece = plan.piece(stage, chunk);
          n.weights += 3 * per_piece + (piece == 0 ? c.context : 0) +
                       (piece == plan.pieces() - 1 ? 2 : 0);  // norm, W_in, W_out; E_k; norm, head
        }
        for (const tpx::axes_traffic& t : rank.traffic_by_axis_names())
          if (t.axes == "X") {
            n.gathers = t.traffic.of(tpx::detail::CollectiveOp::all_gather).calls;
            n.scatters = t.traffic.of(tpx::detail::CollectiveOp::reduce_scatter).calls;
          }
        for (const tpx::axes_traffic& t : rank.traffic_by_axis_names(tpx::traffic_part::background))
          if (t.axes == "X") {
            n.background_gathers = t.traffic.of(tpx::detail::CollectiveOp::all_gather).calls;
            n.background_scatters = t.traffic.of(tpx::detail::CollectiveOp::reduce_scatter).calls;
          }
        const std::lock_guard<std::mutex> guard(lock);
        ranks.push_back(n);
      });
      REQUIRE(ranks.size() == 4);
      for (const counts& n : ranks) {
        CAPTURE(n.stage);
        CHECK(n.gathers == n.weights);
        CHECK(n.scatters == n.weights);
        CHECK(n.background_gathers == (overlap ? n.weights : 0));
        CHECK(n.background_scatters == (overlap ? n.weights : 0));
      }
    }
}

}  // namespace

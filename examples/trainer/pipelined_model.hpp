// The example trainer's model (model.hpp) cut into pipeline stages over mesh axis P, with FSDP
// over X and tensor parallelism over Y inside each stage: the seeds' three ways of cutting a
// model at once, on the model that tpx-train trains.
//
// The schedule (nn/pipeline_schedule.hpp) cuts the L blocks into pieces of L / pieces
// consecutive blocks, `chunks` pieces per stage. Each chunk's parameters are one model_tensors
// whose tensors lead with the stage dim S split over P, block s stage s's piece: W_in
// [S_P, D_X, F_Y], norms [S_P, D_YX], and so on. The first piece also embeds the tokens and the
// last one runs the final norm, the head and the loss, so every chunk holds an embedding and a
// head, used on the stages whose chunk is the first or the last piece (both on stage 0 under the
// zero-bubble V) and left at zero gradient elsewhere. A step runs the batch as M microbatches
// through nn::run_pipeline: a forward pass of a piece is model::embed_forward (first piece) and
// block_forward for each block, its backward pass head_forward_backward (last piece), then
// block_input_gradient for each block, then embed_backward (first piece). The blocks' W_in and
// W_out gradients (block_weight_gradient) follow in the same step, or in the schedule's weight
// step under the zero-bubble orders. Each weight's gradient adds up over the microbatches. The
// loss is nn::cross_entropy_per<S> of each microbatch, on the loss's stage alone, scaled by 1/M;
// after the step one AllReduce over P of the [S_P] losses gives every rank the mean loss over the
// batch, which equals the model's on one rank.
//
// Not yet: activation checkpointing (every microbatch keeps its blocks' states until its
// backward pass), the weights gathered once per step (each pass gathers its blocks' weights over
// X again, as FSDP does without keeping them between microbatches), checkpoints independent of
// the stage count.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tpx/nn/pipeline.hpp>
#include <tpx/nn/pipeline_schedule.hpp>
#include <utility>
#include <vector>

#include "model.hpp"
#include "tensor_set.hpp"

namespace trainer {

// Global layer of block i of chunk c on stage s.
inline int layer_of(const tpx::nn::pipeline_schedule& plan, int per_piece, int s, int c, int i) {
  return plan.piece(s, c) * per_piece + i;
}

// The blocks of one piece of the model: L / pieces.
inline int blocks_per_piece(const config& c, const tpx::nn::pipeline_schedule& plan) {
  if (c.layers % plan.pieces() != 0)
    throw std::invalid_argument("trainer: " + std::to_string(c.layers) +
                                " layers do not cut into " + std::to_string(plan.pieces()) +
                                " pipeline pieces of equal length");
  return c.layers / plan.pieces();
}

// Every parameter-shaped tensor of a pipelined model: a stacked model_tensors per chunk.
template <class Space>
struct pipelined_tensors : tensor_set<pipelined_tensors<Space>> {
  std::vector<model_tensors<Space, S<P>>> chunks;

  // Zeros of every parameter's shape.
  pipelined_tensors(const tpx::rank_context& rank, const config& c,
                    const tpx::nn::pipeline_schedule& plan) {
    for (int chunk = 0; chunk < plan.chunks(); ++chunk)
      chunks.emplace_back(rank, c, blocks_per_piece(c, plan), plan.stages());
  }

  template <class Self, class Fn, class... Others>
  static void visit(Self& self, Fn& f, Others&... others) {
    for (std::size_t c = 0; c < self.chunks.size(); ++c) {
      const std::string prefix = "chunk." + std::to_string(c) + ".";
      model_tensors<Space, S<P>>::visit(
          self.chunks[c], [&](const std::string& name, auto&... t) { f(prefix + name, t...); },
          others.chunks[c]...);
    }
  }
};

// The initial weights of the whole model (initial_weights), each stage's block of a stacked
// tensor from its own layer.
template <class Space>
void initialize(pipelined_tensors<Space>& p, const config& c,
                const tpx::nn::pipeline_schedule& plan) {
  const initial_weights w{c};
  const int per_piece = blocks_per_piece(c, plan);
  // value(s, j): element j of stage s's block, each block `block` elements.
  const auto stacked = [](auto& t, std::int64_t block, const auto& value) {
    fill_staged(t, [&](std::int64_t i) { return value(static_cast<int>(i / block), i % block); });
  };
  const std::int64_t d = c.d_model, table = config::vocab * d;
  for (int chunk = 0; chunk < plan.chunks(); ++chunk) {
    model_tensors<Space, S<P>>& piece = p.chunks[chunk];
    for (int k = 0; k < c.context; ++k)
      stacked(piece.embed[k], table, [&](int, std::int64_t j) { return w.embed(k, j); });
    for (int i = 0; i < per_piece; ++i) {
      stacked(piece.norm[i], d, [](int, std::int64_t) { return 1.0f; });
      stacked(piece.w_in[i], d * c.ffn, [&](int s, std::int64_t j) {
        return w.w_in(layer_of(plan, per_piece, s, chunk, i), j);
      });
      stacked(piece.w_out[i], c.ffn * d, [&](int s, std::int64_t j) {
        return w.w_out(layer_of(plan, per_piece, s, chunk, i), j);
      });
    }
    stacked(piece.final_norm, d, [](int, std::int64_t) { return 1.0f; });
    stacked(piece.head, d * config::vocab, [&](int, std::int64_t j) { return w.head(j); });
  }
}

// Microbatch m of the step's batch: rows [m b / M, (m + 1) b / M) of it, the same in every
// stage's block, tokens[S_P, B_X, W] in Space.
template <class Space>
std::vector<tpx::BasicTensor<Space, std::int32_t, S<P>, B<X>, W<>>> load_microbatches(
    const tpx::rank_context& rank, const text_data& data, const config& c, std::int64_t step,
    int microbatches) {
  if (c.batch % microbatches != 0)
    throw std::invalid_argument("trainer: a batch of " + std::to_string(c.batch) +
                                " rows does not cut into " + std::to_string(microbatches) +
                                " microbatches of equal size");
  const std::int64_t rows = c.batch / microbatches, width = c.context + 1;
  const std::int64_t stages = rank.axis<P>().size;
  std::vector<tpx::BasicTensor<Space, std::int32_t, S<P>, B<X>, W<>>> out;
  for (int m = 0; m < microbatches; ++m) {
    tpx::BasicTensor<tpx::host_space, std::int32_t, S<P>, B<X>, W<>> t(
        rank, {S(stages), B(rows), W(width)});
    tpx::fill_with(t, [&](std::int64_t i) {
      const std::int64_t row = m * rows + (i / width) % rows;
      return data.byte_at(c.seed, step, c.batch, row, static_cast<int>(i % width));
    });
    out.push_back(tpx::in_space<Space>(std::move(t)));
  }
  return out;
}

// The forward and backward passes of a step through the pipeline, in compute type Tc.
template <class Tc, class Space = tpx::host_space>
class pipelined_model {
 public:
  using piece_model = model<Tc, Space, S<P>>;
  using act = typename piece_model::act;
  using tokens_t = typename piece_model::tokens_t;
  using params = pipelined_tensors<Space>;
  using loss_t = tpx::BasicTensor<Space, float>;

  pipelined_model(const tpx::rank_context& rank, const config& c, tpx::nn::pipeline_schedule plan,
                  tpx::nn::pipeline_passes passes = tpx::nn::pipeline_passes::in_step)
      : rank_(rank),
        c_(c),
        plan_(std::move(plan)),
        passes_(passes),
        per_piece_(blocks_per_piece(c, plan_)),
        net_(rank, c, plan_.stages()) {
    if (c.checkpoint_every != 0)
      throw std::invalid_argument(
          "trainer: activation checkpointing is not yet supported with pipeline stages");
  }

  // The mean loss over the batch (the same scalar on every rank); grads receives each
  // parameter's gradient, summed over the microbatches.
  loss_t forward_backward(const params& p, const std::vector<tokens_t>& batch,
                          params& grads) const {
    const int stage = rank_.axis<P>().coord, microbatches = plan_.microbatches();
    if (static_cast<int>(batch.size()) != microbatches)
      throw std::invalid_argument("trainer: a pipeline of " + std::to_string(microbatches) +
                                  " microbatches was given " + std::to_string(batch.size()));
    const float share = 1.0f / static_cast<float>(microbatches);
    const auto first = [&](int chunk) { return plan_.piece(stage, chunk) == 0; };
    const auto last = [&](int chunk) { return plan_.piece(stage, chunk) == plan_.pieces() - 1; };
    // By chunk and microbatch: each block's saved state and (under the zero-bubble orders) what
    // its backward pass keeps for its weight gradients, the last piece's output.
    using state_t = typename piece_model::block_state;
    using kept_t = typename piece_model::block_gradients;
    std::vector<std::vector<std::vector<state_t>>> states(
        plan_.chunks(), std::vector<std::vector<state_t>>(microbatches));
    std::vector<std::vector<std::vector<kept_t>>> kept(
        plan_.chunks(), std::vector<std::vector<kept_t>>(microbatches));
    std::vector<std::vector<std::optional<act>>> outputs(
        plan_.chunks(), std::vector<std::optional<act>>(microbatches));
    tpx::BasicTensor<Space, float, S<P>> losses(rank_, {S(plan_.stages())});
    const auto forward = [&](int m, int chunk, act in) {
      const auto& piece = p.chunks[chunk];
      act x = first(chunk) ? net_.embed_forward(piece, batch[m]) : std::move(in);
      for (int i = 0; i < per_piece_; ++i) {
        states[chunk][m].push_back(net_.block_forward(piece, i, x));
        x = states[chunk][m].back().out;
      }
      if (last(chunk)) outputs[chunk][m] = x;
      return x;
    };
    // The input gradient, and with `weights` the blocks' weight gradients too.
    const auto backward = [&](int m, int chunk, act dout, bool weights) {
      const auto& piece = p.chunks[chunk];
      auto& grad = grads.chunks[chunk];
      const bool accumulate = m > 0;
      if (last(chunk)) {
        auto head = net_.head_forward_backward(piece, *outputs[chunk][m], batch[m], grad,
                                               accumulate, share);
        losses = tpx::add(losses, head.loss);
        dout = std::move(head.dx);
        outputs[chunk][m].reset();
      }
      for (int i = per_piece_ - 1; i >= 0; --i) {
        auto g = net_.block_input_gradient(piece, i, states[chunk][m][i], dout, grad, accumulate);
        if (weights)
          net_.block_weight_gradient(i, states[chunk][m][i], g.kept, grad, accumulate);
        else
          kept[chunk][m].push_back(std::move(g.kept));  // the last block's first
        dout = std::move(g.dx);
      }
      if (weights) states[chunk][m].clear();
      if (first(chunk)) net_.embed_backward(batch[m], dout, grad, accumulate);
      return dout;
    };
    const act like(rank_, {S(plan_.stages()), B(c_.batch / microbatches), D(c_.d_model)});
    if (!plan_.splits_backward()) {
      tpx::nn::run_pipeline<P, S>(like, plan_, passes_, forward, [&](int m, int chunk, act dout) {
        return backward(m, chunk, std::move(dout), true);
      });
    } else {
      tpx::nn::run_pipeline<P, S>(
          like, plan_, passes_, forward,
          [&](int m, int chunk, act dout) { return backward(m, chunk, std::move(dout), false); },
          [&](int m, int chunk) {
            for (int i = 0; i < per_piece_; ++i)
              net_.block_weight_gradient(i, states[chunk][m][i], kept[chunk][m][per_piece_ - 1 - i],
                                         grads.chunks[chunk], m > 0);
            states[chunk][m].clear();
            kept[chunk][m].clear();
          });
    }
    // The step's loss: the [S_P] losses summed over S (0 but on the loss's stage), over P.
    const auto ones = tpx::map(tpx::kernels::add_scalar{1.0f},
                               tpx::BasicTensor<Space, float, S<P>>(rank_, {S(plan_.stages())}));
    return tpx::all_reduce<P>(tpx::einsum<S>(losses, ones));
  }

 private:
  const tpx::rank_context& rank_;
  config c_;
  tpx::nn::pipeline_schedule plan_;
  tpx::nn::pipeline_passes passes_;
  int per_piece_;
  piece_model net_;
};

}  // namespace trainer

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
// Checkpoints hold the whole model's tensors under model_tensors' names, each stacked block saved
// as its layer (pipelined_tensors::for_each_layer), so they load onto any number of stages.
//
// With activation checkpointing (config::checkpoint_every = C > 0) a microbatch's forward pass of
// a piece keeps only the input of every C-th block of the piece, and its backward pass runs each
// segment forward again from it first (block_stack.hpp's segments, which do not cross pieces):
// the same operations on the same inputs, so the same results to the bit.
//
// FSDP's collectives over X run once per step, not once per pass (pipeline_fsdp.hpp): each
// chunk's weights are all-gathered part by part before the first pass uses them and kept through
// the step (model::gathered_weights), and the weight gradients are added up over the microbatches
// as partial sums over X (model::partial_gradients), each part's reduce-scattered once the last
// microbatch has added to it; the embedding's only on the stage whose chunk is the first piece,
// the final norm's and head's only on the last piece's. With config::overlap, as the passes
// between stages, these gathers and reductions run in the background: the first forward pass
// waits for a block's weights only as it reaches the block, and the last backward pass goes on
// while the blocks behind it reduce. FSDP without a pipeline runs them in each pass, which the 2M
// passes of a piece would repeat 2M times (M for the gradients); pipeline_config's fsdp_per_pass
// (tpx-train --fsdp-per-pass) does so, holding less, and so does a mesh whose X has one rank, over
// which nothing moves (the gathered copies would only take memory).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <tpx/nn/pipeline.hpp>
#include <tpx/nn/pipeline_schedule.hpp>
#include <type_traits>
#include <utility>
#include <vector>

#include "block_stack.hpp"
#include "model.hpp"
#include "pipeline_fsdp.hpp"
#include "tensor_set.hpp"

namespace trainer {

// Global layer of block i of chunk c on stage s.
inline int layer_of(const tpx::nn::pipeline_placement& placement, int per_piece, int s, int c,
                    int i) {
  return placement.piece(s, c) * per_piece + i;
}

// The blocks of one piece of the model: L / pieces.
inline int blocks_per_piece(const config& c, int pieces) {
  if (c.layers % pieces != 0)
    throw std::invalid_argument("trainer: " + std::to_string(c.layers) +
                                " layers do not cut into " + std::to_string(pieces) +
                                " pipeline pieces of equal length");
  return c.layers / pieces;
}

// The pipelined model's settings: the model's (config), and how it is cut: into `stages` stages
// (the size of mesh axis P), a step's batch into `microbatches`, run in the order `schedule`
// names (schedule_orders; interleaved with two chunks per stage).
struct pipeline_config : config {
  int stages = 2;
  int microbatches = 4;
  std::string schedule = "1f1b";
  bool fsdp_per_pass = false;  // FSDP's collectives over X in every pass, not once per step
  // config::overlap: the passes between stages, and FSDP's gathers and reductions, in the
  // background
};

// The orders by the names `schedule` takes.
inline const std::vector<std::pair<std::string, tpx::nn::pipeline_order>>& schedule_orders() {
  using tpx::nn::pipeline_order;
  static const std::vector<std::pair<std::string, pipeline_order>> orders{
      {"gpipe", pipeline_order::gpipe},
      {"1f1b", pipeline_order::one_f_one_b},
      {"zero-bubble", pipeline_order::zero_bubble},
      {"interleaved", pipeline_order::interleaved},
      {"zero-bubble-v", pipeline_order::zero_bubble_v}};
  return orders;
}

// c's schedule; std::invalid_argument with the sentence for the user when c's stages,
// microbatches and schedule do not make one.
inline tpx::nn::pipeline_schedule schedule_of(const pipeline_config& c) {
  for (const auto& [name, order] : schedule_orders())
    if (name == c.schedule)
      return tpx::nn::pipeline_schedule(
          c.stages, c.microbatches, order,
          {.chunks = order == tpx::nn::pipeline_order::interleaved ? 2 : 1});
  std::string names;
  for (const auto& named : schedule_orders()) names += (names.empty() ? "" : ", ") + named.first;
  throw std::invalid_argument("trainer: no pipeline schedule is called '" + c.schedule +
                              "' (there are " + names + ")");
}

// Throws when rank's mesh axis P is not c's stages.
inline void check_stages(const tpx::rank_context& rank, const pipeline_config& c) {
  if (rank.axis<P>().size != c.stages)
    throw std::invalid_argument("trainer: a model cut into " + std::to_string(c.stages) +
                                " pipeline stages on a mesh whose axis P has " +
                                std::to_string(rank.axis<P>().size));
}

// Every parameter-shaped tensor of a pipelined model: a stacked model_tensors per chunk.
template <class Space>
struct pipelined_tensors : tensor_set<pipelined_tensors<Space>> {
  std::vector<model_tensors<Space, S<P>>> chunks;

  // Zeros of every parameter's shape.
  pipelined_tensors(const tpx::rank_context& rank, const config& c,
                    const tpx::nn::pipeline_schedule& plan)
      : placement_(plan.placement()), per_piece_(blocks_per_piece(c, plan.pieces())) {
    for (int chunk = 0; chunk < plan.chunks(); ++chunk)
      chunks.emplace_back(rank, c, per_piece_, plan.stages());
  }
  pipelined_tensors(const tpx::rank_context& rank, const pipeline_config& c)
      : pipelined_tensors(rank, c, schedule_of(c)) {
    check_stages(rank, c);
  }

  // f(name_of, tensor, others' tensor...) for every tensor, name_of(s) the whole model's name
  // of its block s (model_tensors' names: "block.5.w_in" for the layer stage s's chunk holds),
  // or "" for a block of the embedding, the final norm or the head that stage s's chunk does not
  // use. Checkpoints save and load each block so (training.hpp), so they hold the whole model's
  // tensors under its names and load onto any number of stages, or without a pipeline.
  template <class Fn, class... Others>
  void for_each_layer(Fn&& f, Others&... others) {
    visit_layers(*this, f, others...);
  }
  template <class Fn, class... Others>
  void for_each_layer(Fn&& f, Others&... others) const {
    visit_layers(*this, f, others...);
  }

  template <class Self, class Fn, class... Others>
  static void visit(Self& self, Fn& f, Others&... others) {
    for (std::size_t c = 0; c < self.chunks.size(); ++c) {
      const std::string prefix = "chunk." + std::to_string(c) + ".";
      auto prefixed = [&](const std::string& name, auto&... t) { f(prefix + name, t...); };
      model_tensors<Space, S<P>>::visit(self.chunks[c], prefixed, others.chunks[c]...);
    }
  }

 private:
  template <class Self, class Fn, class... Others>
  static void visit_layers(Self& self, Fn& f, Others&... others) {
    for (std::size_t c = 0; c < self.chunks.size(); ++c) {
      const int chunk = static_cast<int>(c);
      auto named = [&](const std::string& part, int layer, auto&... t) {
        const auto name_of = [&](std::int64_t s) {
          return self.whole_model_name(part, layer, static_cast<int>(s), chunk);
        };
        f(name_of, t...);
      };
      model_tensors<Space, S<P>>::visit_parts(self.chunks[c], named, others.chunks[c]...);
    }
  }

  // The whole model's name of stage s's block of chunk c's `part` of its block `layer` (-1 for
  // the parts outside the blocks), or "" for a block of the embedding, final norm or head that is
  // not used.
  std::string whole_model_name(const std::string& part, int layer, int s, int c) const {
    const int piece = placement_.piece(s, c);
    if (layer >= 0)
      return model_tensors<Space, S<P>>::name_of(part,
                                                 layer_of(placement_, per_piece_, s, c, layer));
    const bool used = part.starts_with("embed.") ? piece == 0 : piece == placement_.pieces() - 1;
    return used ? part : std::string();
  }

  tpx::nn::pipeline_placement placement_;
  int per_piece_;
};

// The initial weights of the whole model (initial_weights), each stage's block of a stacked
// tensor from its own layer.
template <class Space>
void initialize(pipelined_tensors<Space>& p, const config& c,
                const tpx::nn::pipeline_schedule& plan) {
  const initial_weights w{c};
  const int per_piece = blocks_per_piece(c, plan.pieces());
  // value(s, j): element j of stage s's block, each block `block` elements.
  const auto fill_by_stage = [](auto& t, std::int64_t block, const auto& value) {
    fill_staged(t, [&](std::int64_t i) { return value(static_cast<int>(i / block), i % block); });
  };
  const std::int64_t d = c.d_model, table = config::vocab * d;
  for (int chunk = 0; chunk < plan.chunks(); ++chunk) {
    model_tensors<Space, S<P>>& piece = p.chunks[chunk];
    for (int k = 0; k < c.context; ++k)
      fill_by_stage(piece.embed[k], table, [&](int, std::int64_t j) { return w.embed(k, j); });
    for (int i = 0; i < per_piece; ++i) {
      fill_by_stage(piece.norm[i], d, [](int, std::int64_t) { return 1.0f; });
      fill_by_stage(piece.w_in[i], d * c.ffn, [&](int s, std::int64_t j) {
        return w.w_in(layer_of(plan.placement(), per_piece, s, chunk, i), j);
      });
      fill_by_stage(piece.w_out[i], c.ffn * d, [&](int s, std::int64_t j) {
        return w.w_out(layer_of(plan.placement(), per_piece, s, chunk, i), j);
      });
    }
    fill_by_stage(piece.final_norm, d, [](int, std::int64_t) { return 1.0f; });
    fill_by_stage(piece.head, d * config::vocab, [&](int, std::int64_t j) { return w.head(j); });
  }
}

// A step's batch as its M microbatches, tokens[S_P, B_X, W] in Space each.
template <class Space>
struct pipeline_batch {
  std::vector<tpx::BasicTensor<Space, std::int32_t, S<P>, B<X>, W<>>> microbatches;
};

// h's microbatches into d's (recorded_training.hpp's copy of a step's batch into the tensors a
// recording reads).
template <class Space>
void copy_batch(pipeline_batch<Space>& d, const pipeline_batch<tpx::host_space>& h) {
  for (std::size_t m = 0; m < d.microbatches.size(); ++m)
    tpx::copy_from_host(d.microbatches[m], h.microbatches[m]);
}

// Microbatch m of the step's batch: rows [m b / M, (m + 1) b / M) of it, the same in every
// stage's block.
template <class Space>
pipeline_batch<Space> load_microbatches(const tpx::rank_context& rank, const text_data& data,
                                        const config& c, std::int64_t step, int microbatches) {
  if (c.batch % microbatches != 0)
    throw std::invalid_argument("trainer: a batch of " + std::to_string(c.batch) +
                                " rows does not cut into " + std::to_string(microbatches) +
                                " microbatches of equal size");
  const std::int64_t rows = c.batch / microbatches, width = c.context + 1;
  const std::int64_t stages = rank.axis<P>().size;
  pipeline_batch<Space> out;
  using tokens = tpx::BasicTensor<Space, std::int32_t, S<P>, B<X>, W<>>;
  for (int m = 0; m < microbatches; ++m)
    out.microbatches.push_back(
        staged_tensor<tokens>(rank, {S(stages), B(rows), W(width)}, [&](std::int64_t i) {
          const std::int64_t row = m * rows + (i / width) % rows;
          return data.byte_at(c.seed, step, c.batch, row, static_cast<int>(i % width));
        }));
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
        per_piece_(blocks_per_piece(c, plan_.pieces())),
        net_(rank, c, plan_.stages()) {}
  pipelined_model(const tpx::rank_context& rank, const pipeline_config& c)
      : pipelined_model(rank, c, schedule_of(c),
                        c.overlap ? tpx::nn::pipeline_passes::in_background
                                  : tpx::nn::pipeline_passes::in_step) {
    check_stages(rank, c);
    fsdp_per_pass_ = c.fsdp_per_pass;
  }

  // The mean loss over the batch (the same scalar on every rank); grads receives each
  // parameter's gradient, summed over the microbatches.
  loss_t forward_backward(const params& p, const pipeline_batch<Space>& tokens,
                          params& grads) const {
    const std::vector<tokens_t>& batch = tokens.microbatches;
    const int stage = rank_.axis<P>().coord, microbatches = plan_.microbatches();
    if (static_cast<int>(batch.size()) != microbatches)
      throw std::invalid_argument("trainer: a pipeline of " + std::to_string(microbatches) +
                                  " microbatches was given " + std::to_string(batch.size()));
    const float share = 1.0f / static_cast<float>(microbatches);
    const auto first = [&](int chunk) { return plan_.piece(stage, chunk) == 0; };
    const auto last = [&](int chunk) { return plan_.piece(stage, chunk) == plan_.pieces() - 1; };
    // By chunk and microbatch: each block's saved state, the inputs kept under activation
    // checkpointing, what the backward pass keeps for the weight gradients (under the zero-bubble
    // orders), the last piece's output.
    using state_t = typename piece_model::block_state;
    using kept_t = typename piece_model::block_gradients;
    const auto by_chunk_and_microbatch = [&]<class T>(std::type_identity<T>) {
      return std::vector<std::vector<T>>(plan_.chunks(), std::vector<T>(microbatches));
    };
    auto states =
        by_chunk_and_microbatch(std::type_identity<std::vector<std::optional<state_t>>>{});
    auto inputs = by_chunk_and_microbatch(std::type_identity<std::vector<act>>{});
    auto kept = by_chunk_and_microbatch(std::type_identity<std::vector<kept_t>>{});
    auto outputs = by_chunk_and_microbatch(std::type_identity<std::optional<act>>{});
    tpx::BasicTensor<Space, float, S<P>> losses(rank_, {S(plan_.stages())});
    const int every = c_.checkpoint_every;
    // What the passes take: each chunk's weights gathered over X once for the step and its
    // weight gradients added up as partial sums over X, each part's reduce-scattered once its
    // last microbatch has added to it (pipeline_fsdp.hpp; in background tasks with overlap); or
    // (fsdp_per_pass) the masters, gathered again in every pass, and the gradients' shards, each
    // microbatch's reduce-scattered in its pass. A chunk gathers the embedding only if it is the
    // first piece, the final norm and head only if the last.
    const bool overlap = passes_ == tpx::nn::pipeline_passes::in_background;
    std::deque<chunk_fsdp<piece_model>> fsdp;  // by chunk; none when the passes take the masters
    typename chunk_fsdp<piece_model>::reductions_t reductions(rank_, overlap);
    if (!fsdp_per_pass_ && rank_.axis<X>().size > 1)  // over one rank nothing would move
      for (int chunk = 0; chunk < plan_.chunks(); ++chunk)
        fsdp.emplace_back(
            net_, rank_, overlap, p.chunks[chunk], per_piece_,
            typename piece_model::ends_run{.embedding = first(chunk), .head = last(chunk)});
    const auto with_weights = [&](int chunk, const auto& pass) {
      return fsdp.empty() ? pass(p.chunks[chunk], grads.chunks[chunk])
                          : pass(fsdp[chunk].weights(), fsdp[chunk].partials());
    };
    // fn(fsdp[chunk]) when the chunk's FSDP runs once per step: waiting for a gathered part
    // before a pass uses it, reducing a part's gradients after its last microbatch.
    const auto once_per_step = [&](int chunk, const auto& fn) {
      if (!fsdp.empty()) fn(fsdp[chunk]);
    };
    // The backward passes (and weight steps) each chunk has begun: the M-th is its last.
    std::vector<int> backwards(plan_.chunks()), weight_steps(plan_.chunks());
    const auto forward = [&](int m, int chunk, act in) {
      return with_weights(chunk, [&](const auto& piece, auto&) {
        auto& held = states[chunk][m];
        held.resize(static_cast<std::size_t>(per_piece_));
        if (first(chunk)) once_per_step(chunk, [](auto& f) { f.ready_embedding(); });
        act x = first(chunk) ? net_.embed_forward(piece, batch[m]) : std::move(in);
        for (int i = 0; i < per_piece_; ++i) {
          once_per_step(chunk, [i](auto& f) { f.ready_block(i); });
          if (every == 0) {
            held[i] = net_.block_forward(piece, i, x);
            x = held[i]->out;
          } else {
            if (i % every == 0) inputs[chunk][m].push_back(x);
            x = net_.block_forward(piece, i, x).out;
          }
        }
        if (last(chunk)) outputs[chunk][m] = x;
        return x;
      });
    };
    // The input gradient, and with `weights` the blocks' weight gradients too. Under activation
    // checkpointing, each segment of `every` blocks runs forward again from its kept input first
    // (segments do not cross pieces).
    const auto backward = [&](int m, int chunk, act dout, bool weights) {
      const bool last_microbatch = ++backwards[chunk] == microbatches;
      const auto reduce = [&](auto part) {  // part(fsdp, grads) after the last microbatch
        if (last_microbatch) once_per_step(chunk, [&](auto& f) { part(f, grads.chunks[chunk]); });
      };
      return with_weights(chunk, [&](const auto& piece, auto& grad) {
        auto& held = states[chunk][m];
        const bool accumulate = m > 0;
        if (last(chunk)) {
          once_per_step(chunk, [](auto& f) { f.ready_head(); });
          auto head = net_.head_forward_backward(piece, *outputs[chunk][m], batch[m], grad,
                                                 accumulate, share);
          reduce([&](auto& f, auto& g) { f.reduce_head(g, reductions); });
          losses = tpx::add(losses, head.loss);
          dout = std::move(head.dx);
          outputs[chunk][m].reset();
        }
        const auto through = [&](int from, int to) {  // blocks [from, to), the last first
          for (int i = to - 1; i >= from; --i) {
            auto g = net_.block_input_gradient(piece, i, *held[i], dout, grad, accumulate);
            if (weights) {
              net_.block_weight_gradient(i, *held[i], g.kept, grad, accumulate);
              held[i].reset();
              reduce([&](auto& f, auto& to) { f.reduce_block(i, to, reductions); });
            } else {
              kept[chunk][m].push_back(std::move(g.kept));  // the last block's first
            }
            dout = std::move(g.dx);
          }
        };
        if (every == 0) {
          through(0, per_piece_);
        } else {
          segments_last_first(per_piece_, every, [&](int from, int to) {
            act x = inputs[chunk][m][from / every];
            for (int i = from; i < to; ++i) {
              held[i] = net_.block_forward(piece, i, x);
              x = held[i]->out;
            }
            through(from, to);
          });
          inputs[chunk][m].clear();
        }
        if (first(chunk)) {
          net_.embed_backward(batch[m], dout, grad, accumulate);
          reduce([&](auto& f, auto& to) { f.reduce_embedding(to, reductions); });
        }
        return dout;
      });
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
            const bool last_microbatch = ++weight_steps[chunk] == microbatches;
            with_weights(chunk, [&](const auto&, auto& grad) {
              for (int i = 0; i < per_piece_; ++i) {
                net_.block_weight_gradient(i, *states[chunk][m][i],
                                           kept[chunk][m][per_piece_ - 1 - i], grad, m > 0);
                if (last_microbatch)
                  once_per_step(
                      chunk, [&](auto& f) { f.reduce_block(i, grads.chunks[chunk], reductions); });
              }
              return 0;
            });
            states[chunk][m].clear();
            kept[chunk][m].clear();
          });
    }
    tpx::mark_phase("gradient reductions (wait)");
    reductions.wait();
    // The step's loss: the [S_P] losses summed over S (0 but on the loss's stage), over P.
    return tpx::all_reduce<P>(tpx::sum<S>(losses));
  }

 private:
  const tpx::rank_context& rank_;
  config c_;
  tpx::nn::pipeline_schedule plan_;
  tpx::nn::pipeline_passes passes_;
  int per_piece_;
  piece_model net_;
  bool fsdp_per_pass_ = false;
};

}  // namespace trainer

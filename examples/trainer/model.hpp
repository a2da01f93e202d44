// The model of the example trainer: a byte-level language model made of L residual MLP blocks,
// trained with FSDP over mesh axis X and tensor parallelism over Y — the notes' running example
// (seed 001, "Combined FSDP and Tensor Parallelism") grown into something that learns.
//
//   x0[B_X, D_Y]  = sum_k E_k[token_k]                      (one table per context position)
//   block l:  h   = RMSNorm(x) ;  x += GELU(h *_D W_in[D_X, F_Y]) *_F W_out[F_Y, D_X]
//   logits[B_X, V_Y] = RMSNorm(x_L) *_D Head[D_X, V_Y] ;     loss = mean cross-entropy, over the
//                                                             vocabulary shards (nn/cross_entropy)
//
// Every parameter is an fp32 master sharded over both axes; before use it is cast to the compute
// type, all-gathered over X (FSDP) and dropped after. The collectives of the forward pass are
// named as types below (gather_weight, gather_act, ...); the backward pass applies their
// adjoints (tpx::adjoint_t), so each gradient arrives reduce-scattered onto its parameter's
// sharding without a hand-written collective. README.md sets the notes' equations beside this
// code. With checkpoint_every = C > 0 only every C-th block input is kept, and each segment's
// forward pass is recomputed during the backward pass (seed 000, activation checkpointing;
// block_stack.hpp, shared with the GPT example); with 0 nothing is recomputed.
//
// With config::overlap (tpx-train --overlap on) FSDP's communication overlaps the products
// (overlap.hpp, shared with the GPT example): each block's three weights are gathered together
// one block visit ahead, on the rank's communication thread (a CUDA rank's second stream), the
// final norm's and the head's during the last block's forward pass, and each block's gradients
// are reduce-scattered together while the next block's backward pass runs; the collectives over
// Y, into and out of each block, and the embedding tables' gathers stay on the rank's own thread.
// The operations and their data are those without overlap, so the results are the same bits;
// memory holds two blocks' gathered weights instead of one weight, and a block's partial
// gradients until their task has run.
//
// The tensors live in the rank's memory space (Space: host memory under spmd(tpx::host, ...),
// the GPU under a CUDA launcher), and the whole step runs there: GEMMs, collectives, the layers
// of tpx/nn (embedding, RMSNorm over D_Y, vocab-parallel cross-entropy, clipping, AdamW). The
// code cannot touch a device tensor's elements from the host (Tensor::local() does not compile
// for a device space); the batch's tokens are copied in once per step, and the loss comes back
// as a scalar tensor that the caller reads only when it reports (training.hpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <tpx/nn/adamw.hpp>
#include <tpx/nn/cross_entropy.hpp>
#include <tpx/nn/embedding.hpp>
#include <tpx/nn/gelu_product.hpp>
#include <tpx/nn/global_norm.hpp>
#include <tpx/nn/rmsnorm.hpp>
#include <tpx/spmd/phase_clock.hpp>
#include <tpx/tensor/staging.hpp>
#include <tpx/tpx.hpp>
#include <type_traits>
#include <vector>

#include "block_stack.hpp"
#include "overlap.hpp"
#include "tensor_set.hpp"
#include "text_data.hpp"

namespace trainer {

TPX_MESH_AXES(P, X, Y);  // P: pipeline stages, X: data parallel + FSDP, Y: tensor parallel
TPX_DIMS(S, B, D, F, V, W);  // stage, batch rows, width, MLP width, vocabulary (bytes), window

using tpx::AllGather;
using tpx::ReduceScatter;
using tpx::Unreduced;

struct config {
  std::int64_t batch = 64;
  std::int64_t d_model = 64;
  std::int64_t ffn = 256;
  int layers = 4;
  int context = 3;
  int checkpoint_every = 0;  // 0: keep every activation
  // FSDP's gathers and reduce-scatters of the blocks and the head in background tasks while the
  // products run (model::forward_backward); a pipeline's passes between stages
  // (pipelined_model.hpp).
  bool overlap = false;
  std::uint64_t seed = 1;
  float init_scale = 1.0f;
  static constexpr std::int64_t vocab = 256;
};

// The global shape of a tensor of dims Dims..., led by the stage dim Lead... (extent `stages`)
// when the model is cut into pipeline stages: stacked<Lead...>(stages, D(d)) is {S(stages), D(d)}
// or {D(d)}.
template <class... Lead, tpx::Dim... Dims>
tpx::Shape<tpx::unsplit_t<Lead>..., Dims...> stacked([[maybe_unused]] std::int64_t stages,
                                                     Dims... dims) {
  return {tpx::unsplit_t<Lead>(stages)..., dims...};
}

// Every parameter-shaped tensor of the model, fp32, in memory space Space: the master weights,
// their gradients and the two Adam moments are each one of these. With Lead = S<P>, a pipeline
// stage's piece of the model (pipelined_model.hpp): every tensor leads with the stage dim, its
// block s stage s's layers, and `stages` is S's extent.
template <class Space, class... Lead>
struct model_tensors : trainer::tensor_set<model_tensors<Space, Lead...>> {
  static_assert(sizeof...(Lead) <= 1, "trainer: a model's tensors lead with one stage dim at most");
  template <class T, class... Spec>
  using Tensor = tpx::BasicTensor<Space, T, Lead..., Spec...>;

  std::vector<Tensor<float, V<X>, D<Y>>> embed;
  std::vector<Tensor<float, D<Y, X>>> norm;
  std::vector<Tensor<float, D<X>, F<Y>>> w_in;
  std::vector<Tensor<float, F<Y>, D<X>>> w_out;
  Tensor<float, D<Y, X>> final_norm;
  Tensor<float, D<X>, V<Y>> head;

  // Zeros of every parameter's shape, `layers` blocks of them.
  model_tensors(const tpx::rank_context& rank, const config& c, int layers, std::int64_t stages = 1)
      : final_norm(rank, stacked<Lead...>(stages, D(c.d_model))),
        head(rank, stacked<Lead...>(stages, D(c.d_model), V(config::vocab))) {
    for (int k = 0; k < c.context; ++k)
      embed.emplace_back(rank, stacked<Lead...>(stages, V(config::vocab), D(c.d_model)));
    for (int l = 0; l < layers; ++l) {
      norm.emplace_back(rank, stacked<Lead...>(stages, D(c.d_model)));
      w_in.emplace_back(rank, stacked<Lead...>(stages, D(c.d_model), F(c.ffn)));
      w_out.emplace_back(rank, stacked<Lead...>(stages, F(c.ffn), D(c.d_model)));
    }
  }
  // The whole model's.
  model_tensors(const tpx::rank_context& rank, const config& c)
      : model_tensors(rank, c, c.layers) {}

  // Every tensor in order, as f(part, layer, tensor, others' tensor...): the parts "norm",
  // "w_in" and "w_out" of block `layer`, then "embed.<k>", "final_norm" and "head" with layer -1.
  template <class Self, class Fn, class... Others>
  static void visit_parts(Self& self, Fn& f, Others&... others) {
    for (std::size_t k = 0; k < self.embed.size(); ++k)
      f("embed." + std::to_string(k), -1, self.embed[k], others.embed[k]...);
    for (std::size_t l = 0; l < self.norm.size(); ++l) {
      const int layer = static_cast<int>(l);
      f(std::string("norm"), layer, self.norm[l], others.norm[l]...);
      f(std::string("w_in"), layer, self.w_in[l], others.w_in[l]...);
      f(std::string("w_out"), layer, self.w_out[l], others.w_out[l]...);
    }
    f(std::string("final_norm"), -1, self.final_norm, others.final_norm...);
    f(std::string("head"), -1, self.head, others.head...);
  }
  // The name of a part of block `layer` ("block.5.w_in"), or of a part outside the blocks (-1).
  static std::string name_of(const std::string& part, int layer) {
    return layer < 0 ? part : "block." + std::to_string(layer) + "." + part;
  }

  // Every tensor by name, in order (tensor_set::for_each walks it).
  template <class Self, class Fn, class... Others>
  static void visit(Self& self, Fn& f, Others&... others) {
    auto named = [&](const std::string& part, int layer, auto&... t) {
      f(name_of(part, layer), t...);
    };
    visit_parts(self, named, others...);
  }
};

// model_tensors p(rank, c) holds tensors of the rank's memory space.
template <class Rank>
model_tensors(const Rank&, const config&) -> model_tensors<tpx::space_of_t<Rank>>;

// The initial weights, element i of each matrix of the whole model: N(0, 1/fan_in), each matrix
// from a seed of its own; the norms are ones. The same on every mesh, and for a pipeline's stacked
// pieces (pipelined_model.hpp), which take each block's elements from its layer's matrix.
struct initial_weights {
  const config& c;
  float embed(int k, std::int64_t i) const { return normal(1 + k, 1.0, i); }
  float w_in(int l, std::int64_t i) const {
    return normal(c.context + 2 * l + 1, static_cast<double>(c.d_model), i);
  }
  float w_out(int l, std::int64_t i) const {
    return normal(c.context + 2 * l + 2, static_cast<double>(c.ffn), i);
  }
  float head(std::int64_t i) const {
    return normal(c.context + 2 * c.layers + 1, static_cast<double>(c.d_model), i);
  }

 private:
  float normal(int matrix, double fan_in, std::int64_t i) const {
    const float scale = c.init_scale / static_cast<float>(std::sqrt(fan_in));
    return scale * tpx::kernels::normal_at(c.seed * 1000 + static_cast<std::uint64_t>(matrix),
                                           static_cast<std::uint64_t>(i));
  }
};

template <class Space>
void initialize(model_tensors<Space>& p, const config& c) {
  const initial_weights w{c};
  const auto ones = [](auto& t) { fill_staged(t, [](std::int64_t) { return 1.0f; }); };
  for (int k = 0; k < c.context; ++k)
    fill_staged(p.embed[k], [&](std::int64_t i) { return w.embed(k, i); });
  for (int l = 0; l < c.layers; ++l) {
    ones(p.norm[l]);
    fill_staged(p.w_in[l], [&](std::int64_t i) { return w.w_in(l, i); });
    fill_staged(p.w_out[l], [&](std::int64_t i) { return w.w_out(l, i); });
  }
  ones(p.final_norm);
  fill_staged(p.head, [&](std::int64_t i) { return w.head(i); });
}

// One rank's rows of a step's batch: tokens[B_X, W] with W = context + 1 (inputs, then target),
// in memory space Space.
template <class Space = tpx::host_space>
using batch_tokens = tpx::BasicTensor<Space, std::int32_t, B<X>, W<>>;

// The batch of `step`, read on the host and copied to Space (the step's one host-to-device copy;
// staged_tensor). Every token is a byte, so within the vocabulary the embedding and the loss
// index with.
template <class Space>
batch_tokens<Space> load_batch(const tpx::rank_context& rank, const text_data& data,
                               const config& c, std::int64_t step) {
  static_assert(config::vocab == 256, "trainer: every byte is a token: the vocabulary is 256");
  const std::int64_t width = c.context + 1;
  return staged_tensor<batch_tokens<Space>>(rank, {B(c.batch), W(width)}, [&](std::int64_t i) {
    return data.byte_at(c.seed, step, c.batch, i / width, static_cast<int>(i % width));
  });
}

// Forward and backward passes in compute type Tc (float or tpx::bf16), on tensors of Space.
// With Lead = S<P> the tensors lead with a pipeline's stage dim, and pipelined_model.hpp runs the
// passes a piece and a microbatch at a time: the embedding on the first piece, the head and the
// loss per stage block (nn::cross_entropy_per) on the last, each weight's gradient added to what
// the earlier microbatches left.
template <class Tc, class Space = tpx::host_space, class... Lead>
class model {
 public:
  template <class T, class... Spec>
  using Tensor = tpx::BasicTensor<Space, T, Lead..., Spec...>;
  using params = model_tensors<Space, Lead...>;
  using act = Tensor<Tc, B<X>, D<Y>>;  // activations x[B_X, D_Y], as the notes' In

  // The forward pass's collectives, as types. The backward pass applies their adjoints.
  using gather_weight =
      AllGather<X, D<>>;  // FSDP: W_in[D_X,F_Y], W_out[F_Y,D_X], Head[D_X,V_Y], norms [D_YX]
  using gather_embed = AllGather<X, V<>>;     // FSDP: E[V_X, D_Y] -> [V, D_Y]
  using gather_act = AllGather<Y, D<>>;       // TP: h[B_X, D_Y] -> [B_X, D] before W_in and Head
  using scatter_out = ReduceScatter<Y, D<>>;  // TP: o[B_X, D]{U_Y} -> [B_X, D_Y] after W_out

  // `stages`: the extent of the stage dim, with Lead = S<P>.
  model(const tpx::rank_context& rank, const config& c, std::int64_t stages = 1)
      : rank_(rank), c_(c), stages_(stages) {}

  using tokens_t = Tensor<std::int32_t, B<X>, W<>>;  // batch_tokens, with Lead
  // The loss: a scalar, or with Lead one per stage block.
  using loss_t = Tensor<float>;

  // The ends of the model a piece of it runs: the embedding (the first piece) and the final norm
  // and head (the last). The whole model runs both.
  struct ends_run {
    bool embedding = true;
    bool head = true;
  };

  // Every weight of a params that a piece running `ends` uses, all-gathered over X in the
  // compute type: what the passes below use when a pipeline gathers its weights once per step
  // instead of in every pass (pipeline_fsdp.hpp fills it part by part: gather_embedding, then
  // gather_block and gather_head below). The passes take either: a weight that still splits a
  // dim over X is gathered where it is used, one already gathered is used as it is.
  struct gathered_weights {
    std::vector<Tensor<Tc, V<>, D<Y>>> embed;  // none unless the piece embeds
    std::vector<Tensor<Tc, D<Y>>> norm;
    std::vector<Tensor<Tc, D<>, F<Y>>> w_in;
    std::vector<Tensor<Tc, F<Y>, D<>>> w_out;
    std::optional<Tensor<Tc, D<Y>>> final_norm;  // none unless the piece runs the head
    std::optional<Tensor<Tc, D<>, V<Y>>> head;
  };
  std::vector<Tensor<Tc, V<>, D<Y>>> gather_embedding(const params& p) const {
    std::vector<Tensor<Tc, V<>, D<Y>>> tables;
    for (const auto& e : p.embed) tables.push_back(gathered<gather_embed>(e));
    return tables;
  }

  // Every weight gradient of a piece running `ends` as the passes compute it, a partial sum over X
  // in fp32 ([D, F_Y]{U_X}): what a pipeline adds up over its microbatches and reduce-scatters
  // onto the masters' shards once per step (pipeline_fsdp.hpp), where the passes given a params
  // reduce-scatter each microbatch's. The passes write into either.
  template <class... Spec>
  using partial = Tensor<float, Spec..., tpx::Unreduced<X>>;
  struct partial_gradients {
    std::vector<partial<V<>, D<Y>>> embed;  // none unless the piece embeds
    std::vector<partial<D<Y>>> norm;
    std::vector<partial<D<>, F<Y>>> w_in;
    std::vector<partial<F<Y>, D<>>> w_out;
    std::optional<partial<D<Y>>> final_norm;  // none unless the piece runs the head
    std::optional<partial<D<>, V<Y>>> head;
  };
  // Zeros of every weight's partial gradient, `layers` blocks of them.
  partial_gradients zero_partials(int layers, ends_run ends = {}) const {
    const auto shape = [&](auto... dims) { return stacked<Lead...>(stages_, dims...); };
    const D d(c_.d_model);
    partial_gradients g;
    if (ends.embedding)
      for (int k = 0; k < c_.context; ++k) g.embed.emplace_back(rank_, shape(V(config::vocab), d));
    for (int l = 0; l < layers; ++l) {
      g.norm.emplace_back(rank_, shape(d));
      g.w_in.emplace_back(rank_, shape(d, F(c_.ffn)));
      g.w_out.emplace_back(rank_, shape(F(c_.ffn), d));
    }
    if (ends.head) {
      g.final_norm.emplace(rank_, shape(d));
      g.head.emplace(rank_, shape(d, V(config::vocab)));
    }
    return g;
  }
  // What a partial gradient becomes in a background task (config::overlap, gradient_reductions):
  // reduce-scattered onto its master's shard by the adjoint of the gather Step, then fp32, as
  // deposit makes it (a pipeline's partial_gradients are fp32 already: the cast moves them).
  struct shard_reduction {
    template <class Step, class Partial>
    static auto gradient(Partial&& partial) {
      return tpx::cast<float>(tpx::apply<tpx::adjoint_t<Step>>(std::forward<Partial>(partial)));
    }
  };
  // A block's weights gathered ahead (config::overlap; a pipeline's pipeline_fsdp.hpp), and the
  // final norm and head.
  struct block_weights {
    Tensor<Tc, D<Y>> norm;
    Tensor<Tc, D<>, F<Y>> w_in;
    Tensor<Tc, F<Y>, D<>> w_out;
  };
  block_weights gather_block(const params& p, int l) const {
    return {gathered<gather_weight>(p.norm[l]), gathered<gather_weight>(p.w_in[l]),
            gathered<gather_weight>(p.w_out[l])};
  }
  struct head_weights {
    Tensor<Tc, D<Y>> final_norm;
    Tensor<Tc, D<>, V<Y>> head;
  };
  head_weights gather_head(const params& p) const {
    return {gathered<gather_weight>(p.final_norm), gathered<gather_weight>(p.head)};
  }

  // Loss of the global batch (the same scalar on every rank, in Space); grads receives each
  // parameter's gradient, reduce-scattered onto the parameter's sharding. With config::overlap,
  // FSDP's collectives in background tasks (see the top of the file).
  loss_t forward_backward(const params& p, const tokens_t& tokens, params& grads) const
      requires(sizeof...(Lead) == 0) {
    if (c_.overlap) return forward_backward_overlapped(p, tokens, grads);
    std::optional<loss_t> loss;
    tpx::mark_phase("embedding forward");  // each part marks its phase (--profile-phases)
    const act dx = stack_forward_backward(
        static_cast<int>(p.norm.size()), c_.checkpoint_every, embed_forward(p, tokens),
        [&](int l, const act& x) { return block_forward(p, l, x); },
        [&](const act& x) {
          head_result head = head_forward_backward(p, x, tokens, grads);
          loss = std::move(head.loss);
          return std::move(head.dx);
        },
        [&](int l, const block_state& s, const act& dout) {
          return block_backward(p, l, s, dout, grads);
        });
    tpx::mark_phase("embedding backward");
    embed_backward(tokens, dx, grads);
    return std::move(*loss);
  }

  // forward_backward with each block's weights gathered a visit ahead and its gradients
  // reduce-scattered per block, in background tasks.
  loss_t forward_backward_overlapped(const params& p, const tokens_t& tokens, params& grads) const
      requires(sizeof...(Lead) == 0) {
    const int layers = static_cast<int>(p.norm.size());
    prefetched_blocks<block_weights> weights(
        rank_, true, [this, &p](int l) { return gather_block(p, l); },
        block_visits(layers, c_.checkpoint_every));
    std::optional<tpx::pending<head_weights>> head;
    gradient_reductions<shard_reduction> reductions(rank_, true);
    deferred_gradients deferred(grads, reductions);
    std::optional<loss_t> loss;
    tpx::mark_phase("embedding forward");
    const act dx = stack_forward_backward(
        layers, c_.checkpoint_every, embed_forward(p, tokens),
        [&](int l, const act& x) {
          if (l + 1 == layers && !head)
            head = start_task(rank_, true, [this, &p] { return gather_head(p); });
          tpx::mark_phase("block weights");
          return block_forward(weights.take(l), l, x);
        },
        [&](const act& x) {
          head_result h = head_forward_backward(head->get(), x, tokens, deferred);
          reductions.start();
          loss = std::move(h.loss);
          return std::move(h.dx);
        },
        [&](int l, const block_state& s, const act& dout) {
          tpx::mark_phase("block weights");
          act dx_block = block_backward(weights.take(l), l, s, dout, deferred);
          reductions.start();
          return dx_block;
        });
    tpx::mark_phase("embedding backward");
    embed_backward(tokens, dx, deferred);
    reductions.start();
    tpx::mark_phase("gradient reductions (wait)");
    reductions.wait();
    return std::move(*loss);
  }

  // Matrix FLOPs of one forward + backward pass (2 per multiply-add, backward twice forward;
  // recomputation under activation checkpointing not counted).
  static double flops_for(const config& c) {
    const double b = static_cast<double>(c.batch), d = static_cast<double>(c.d_model);
    return 6.0 * b * (2.0 * d * static_cast<double>(c.ffn) * c.layers + d * config::vocab);
  }

  // The passes of the model's parts, which forward_backward runs in turn and a pipeline runs a
  // piece at a time. They take the weights as a params (each gathered where it is used) or as
  // gathered_weights, and write each weight's gradient into a params (reduce-scattered onto its
  // shard) or a partial_gradients, or add it to what is there when `accumulate` (a pipeline's
  // later microbatches).

  // x[B_X, D_Y] = sum_k E_k[token_k]: a row lookup per context byte.
  template <class Weights>
  act embed_forward(const Weights& p, const tokens_t& tokens) const {
    act x(rank_,
          stacked<Lead...>(stages_, B(tokens.global_extent(sizeof...(Lead))), D(c_.d_model)));
    for (int k = 0; k < c_.context; ++k)
      tpx::nn::embedding_add(x, use<gather_embed>(p.embed.at(k)), tokens, k);  // E_k: [V, D_Y]
    return x;
  }

  // dE_k[V, D_Y]{U_X}: the rows of dx added at their tokens (fp32); the adjoint of gather_embed
  // reduce-scatters it onto E_k[V_X, D_Y].
  template <class Grads>
  void embed_backward(const tokens_t& tokens, const act& dx, Grads& grads,
                      bool accumulate = false) const {
    for (int k = 0; k < c_.context; ++k) {
      auto table = [&] {
        if constexpr (sizeof...(Lead) == 0)
          return tpx::nn::embedding_gradient<V>(dx, tokens, k, config::vocab);
        else
          return tpx::nn::embedding_gradient<S, V>(dx, tokens, k, config::vocab);
      }();
      deposit<gather_embed>(grads.embed.at(k), std::move(table), accumulate);
    }
  }

  using rstd_t = Tensor<float, B<X>>;
  struct block_state {
    act x;                         // block input
    rstd_t rstd;                   // RMSNorm statistics
    Tensor<Tc, B<X>, D<>> h_full;  // normalized input, gathered over Y
    Tensor<Tc, B<X>, F<Y>> a;      // pre-activation
    Tensor<Tc, B<X>, F<Y>> g;      // GELU(a)
    act out;                       // x + block(x)
  };

  template <class Weights>
  block_state block_forward(const Weights& p, int l, const act& x) const {
    const auto& w = block_of(p, l);
    tpx::mark_phase("norm");
    const auto& norm = use<gather_weight>(w.norm);                     // [D_Y]
    auto normed = tpx::nn::rmsnorm_forward(x, norm);                   // h[B_X, D_Y]
    auto h_full = tpx::apply<gather_act>(std::move(normed.y));         // [B_X, D]
    // [B_X, D] *_D [D, F_Y], GELU fused into the product's store
    tpx::mark_phase("MLP up (GELU)");
    auto up = tpx::nn::gelu_product<D>(h_full, use<gather_weight>(w.w_in));
    tpx::mark_phase("MLP down");
    auto o_partial = tpx::contract<F>(up.out, use<gather_weight>(w.w_out));  // [B_X, D]{U_Y}
    act out = tpx::add(x, tpx::apply<scatter_out>(std::move(o_partial)));
    return {x,
            std::move(normed.rstd),
            std::move(h_full),
            std::move(up.pre),
            std::move(up.out),
            std::move(out)};
  }

  // What a block's backward pass keeps for its weight gradients: the gradients at its output,
  // gathered over Y, and at its pre-activation.
  struct block_gradients {
    Tensor<Tc, B<X>, D<>> dout_full;
    Tensor<Tc, B<X>, F<Y>> da;
  };
  struct input_gradient {
    act dx;
    block_gradients kept;
  };

  // The block's input gradient, the norm's weight gradient, and what block_weight_gradient needs
  // (a zero-bubble pipeline runs the two at different ticks).
  template <class Weights, class Grads>
  input_gradient block_input_gradient(const Weights& p, int l, const block_state& s,
                                      const act& dout, Grads& grads,
                                      bool accumulate = false) const {
    const auto& w = block_of(p, l);
    tpx::mark_phase("MLP down backward");
    auto do_full = tpx::apply<tpx::adjoint_t<scatter_out>>(dout);  // [B_X, D]
    const auto& w_out = use<gather_weight>(w.w_out);               // [F_Y, D]
    // (dOut *_D W_out) * GELU'(a): [B_X, F_Y], GELU' fused into the product's store
    auto da = tpx::nn::gelu_product_backward<D>(s.a, do_full, w_out);
    tpx::mark_phase("MLP up backward");
    const auto& w_in = use<gather_weight>(w.w_in);  // [D, F_Y]
    const act dh =
        tpx::apply<tpx::adjoint_t<gather_act>>(tpx::contract<F>(da, w_in));  // [B_X, D_Y]
    tpx::mark_phase("norm backward");
    const auto& norm = use<gather_weight>(w.norm);
    auto dnorm = tpx::nn::rmsnorm_backward(s.x, norm, s.rstd, dh);
    deposit<gather_weight>(grads.norm[l], std::move(dnorm.dw), accumulate);  // [D_YX]
    return {tpx::add(dout, dnorm.dx), {std::move(do_full), std::move(da)}};
  }

  // The gradients of W_out and W_in, reduce-scattered onto their shards.
  template <class Grads>
  void block_weight_gradient(int l, const block_state& s, const block_gradients& kept,
                             Grads& grads, bool accumulate = false) const {
    tpx::mark_phase("MLP weight gradients");
    deposit<gather_weight>(grads.w_out[l], tpx::contract<B>(s.g, kept.dout_full),
                           accumulate);  // [F_Y, D]{U_X} -> [F_Y, D_X]
    deposit<gather_weight>(grads.w_in[l], tpx::contract<B>(s.h_full, kept.da),
                           accumulate);  // [D, F_Y]{U_X} -> [D_X, F_Y]
  }

  // Both: the block's whole backward pass.
  template <class Weights, class Grads>
  act block_backward(const Weights& p, int l, const block_state& s, const act& dout, Grads& grads,
                     bool accumulate = false) const {
    input_gradient g = block_input_gradient(p, l, s, dout, grads, accumulate);
    block_weight_gradient(l, s, g.kept, grads, accumulate);
    return std::move(g.dx);
  }

  struct head_result {
    loss_t loss;
    act dx;
  };

  // Final norm, logits, mean cross-entropy, and their backward pass. The logits stay split over
  // the vocabulary, [B_X, V_Y]: the vocab-parallel loss needs only per-row statistics reduced
  // over Y (nn/cross_entropy.hpp), and its gradient comes back in the logits' sharding. With Lead,
  // the loss is per stage block, and `scale` multiplies it and its gradient (1/M over M
  // microbatches).
  template <class Weights, class Grads>
  head_result head_forward_backward(const Weights& p, const act& x, const tokens_t& tokens,
                                    Grads& grads, bool accumulate = false,
                                    float scale = 1.0f) const {
    tpx::mark_phase("final norm");
    const auto& norm = use<gather_weight>(p.final_norm);
    auto normed = tpx::nn::rmsnorm_forward(x, norm);
    const auto h_full = tpx::apply<gather_act>(std::move(normed.y));  // [B_X, D]
    tpx::mark_phase("LM head");
    const auto& head = use<gather_weight>(p.head);                   // [D, V_Y]
    auto logits = tpx::contract<D>(h_full, head);
    // Logits [B_X, V_Y], handed over: their gradient is written in their place. The target is
    // the last byte.
    tpx::mark_phase("cross-entropy");
    auto ce = [&] {
      if constexpr (sizeof...(Lead) == 0)
        return tpx::nn::cross_entropy(std::move(logits), tokens, c_.context);
      else
        return tpx::nn::cross_entropy_per<S>(std::move(logits), tokens, c_.context, scale);
    }();
    tpx::mark_phase("LM head backward");
    deposit<gather_weight>(grads.head, tpx::contract<B>(h_full, ce.dlogits),
                           accumulate);  // [D, V_Y]{U_X} -> [D_X, V_Y]
    const act dh = tpx::apply<tpx::adjoint_t<gather_act>>(tpx::contract<V>(ce.dlogits, head));
    tpx::mark_phase("final norm backward");
    auto dnorm = tpx::nn::rmsnorm_backward(x, norm, normed.rstd, dh);
    deposit<gather_weight>(grads.final_norm, std::move(dnorm.dw), accumulate);
    return {std::move(ce.loss), std::move(dnorm.dx)};
  }

 private:
  // The parameter cast to the compute type (in fp32: as it is), then all-gathered over X.
  template <class Step, class Master>
  auto gathered(const Master& master) const {
    if constexpr (std::is_same_v<Tc, typename Master::value_type>)
      return tpx::apply<Step>(master);
    else
      return tpx::apply<Step>(tpx::cast<Tc>(master));
  }

  // Block l's weights as its passes use them: a params' masters or a pipeline's gathered_weights,
  // by reference, or a block_weights gathered ahead.
  template <class Norm, class In, class Out>
  struct block_refs {
    const Norm& norm;
    const In& w_in;
    const Out& w_out;
  };
  template <class Weights>
  static auto block_of(const Weights& p, int l) {
    using norm_t = std::decay_t<decltype(p.norm[l])>;
    using in_t = std::decay_t<decltype(p.w_in[l])>;
    using out_t = std::decay_t<decltype(p.w_out[l])>;
    return block_refs<norm_t, in_t, out_t>{p.norm[l], p.w_in[l], p.w_out[l]};
  }
  static const block_weights& block_of(const block_weights& w, int) { return w; }

  // A gradient of params that `reductions` reduce-scatters in a background task: deposit hands
  // the partial sum to them. deferred_gradients holds one for each gradient of a params.
  template <class Grad>
  struct deferred {
    Grad* grad;
    gradient_reductions<shard_reduction>* reductions;
  };
  struct deferred_gradients {
    template <class Grad>
    using slots = std::vector<deferred<Grad>>;
    slots<typename decltype(params::embed)::value_type> embed;
    slots<typename decltype(params::norm)::value_type> norm;
    slots<typename decltype(params::w_in)::value_type> w_in;
    slots<typename decltype(params::w_out)::value_type> w_out;
    deferred<decltype(params::final_norm)> final_norm;
    deferred<decltype(params::head)> head;

    deferred_gradients(params& g, gradient_reductions<shard_reduction>& r)
        : final_norm{&g.final_norm, &r}, head{&g.head, &r} {
      for (auto& e : g.embed) embed.push_back({&e, &r});
      for (std::size_t l = 0; l < g.norm.size(); ++l) {
        norm.push_back({&g.norm[l], &r});
        w_in.push_back({&g.w_in[l], &r});
        w_out.push_back({&g.w_out[l], &r});
      }
    }
  };

  // The weight w as the passes use it: gathered by Step when it still splits a dim over X (a
  // master weight), as it is when it does not (gathered_weights').
  template <class Step, class Weight>
  decltype(auto) use(const Weight& w) const {
    if constexpr (tpx::contains_v<X, typename Weight::traits::axes>)
      return gathered<Step>(w);
    else
      return (w);
  }

  // The part of a gathered_weights that only the pieces running it hold; std::bad_optional_access
  // on one that does not.
  template <class Step, class Weight>
  const Weight& use(const std::optional<Weight>& w) const {
    return w.value();
  }

  // A weight's gradient, a partial sum over X, into grad: reduce-scattered by Step's adjoint onto
  // the master's shard (in the compute type, then fp32), or kept a partial sum in fp32 when grad
  // is one (partial_gradients).
  template <class Step, class Grad, class Partial>
  static void deposit(Grad& grad, Partial&& value, bool accumulate) {
    if constexpr (std::is_same_v<typename Grad::unreduced,
                                 typename std::remove_cvref_t<Partial>::unreduced>)
      store(grad, tpx::cast<float>(std::forward<Partial>(value)), accumulate);
    else
      store(grad, tpx::cast<float>(tpx::apply<tpx::adjoint_t<Step>>(std::forward<Partial>(value))),
            accumulate);
  }

  // To the background task that reduce-scatters it (config::overlap).
  template <class Step, class Grad, class Partial>
  static void deposit(deferred<Grad>& grad, Partial&& value, bool /*accumulate*/) {
    grad.reductions->add(Step{}, *grad.grad, std::forward<Partial>(value));
  }

  // Into the part of a partial_gradients that only the pieces running it hold.
  template <class Step, class Grad, class Partial>
  static void deposit(std::optional<Grad>& grad, Partial&& value, bool accumulate) {
    deposit<Step>(grad.value(), std::forward<Partial>(value), accumulate);
  }

  // grad = value, or grad + value.
  template <class Grad, class Value>
  static void store(Grad& grad, Value&& value, bool accumulate) {
    if (accumulate)
      grad = tpx::add(grad, value);
    else
      grad = std::forward<Value>(value);
  }

  const tpx::rank_context& rank_;
  config c_;
  std::int64_t stages_;
};

}  // namespace trainer

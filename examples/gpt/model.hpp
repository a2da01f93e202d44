// A GPT-style decoder-only transformer over bytes, trained with FSDP over mesh axis X, Megatron
// tensor + sequence parallelism (or tensor parallelism alone) over Y and, optionally, pure data
// parallelism over R (HSDP: replicate over R, shard over X): the flagship example's model (issue
// 11), written with tpx's typed ops so that every collective is visible in the types.
//
//   x[B_RX, T_Y, D] = TokE[token] + PosE[t]                        sequence-parallel residual
//   block l:  h  = AllGather<Y, T>(RMSNorm(x))                       [B_RX, T, D]
//             q  = h *_D Wq[D, H_Y, G, E]                             [B_RX, T, H_Y, G, E]
//             k  = h *_D Wk[D, H_Y, E],  v likewise (T renamed S)     [B_RX, S, H_Y, E]
//                  with config::rope (Llama's positions) no PosE: q and k turned by RoPE
//             o  = causal_attention(q, k, v) *_{H,G,E} Wo[H_Y, G, E, D] [B_RX, T, D]{U_Y}
//             x += ReduceScatter<Y, T>(o)                            [B_RX, T_Y, D]
//             h  = AllGather<Y, T>(RMSNorm(x))
//             x += ReduceScatter<Y, T>(GELU(h *_D Win[D, F_Y]) *_F Wout[F_Y, D])
//                  or, with config::swiglu (Llama's MLP), of
//                  (silu(h *_D Wgate[D, F_Y]) * (h *_D Win[D, F_Y])) *_F Wout[F_Y, D]
//   logits[B_RX, T, V_Y] = AllGather<Y, T>(RMSNorm(x)) *_D Head[D, V_Y]
//   loss = mean cross-entropy over B and T, over the vocabulary shards (nn/cross_entropy.hpp)
//
// H key and value heads, each with G query heads (config::kv_heads; G = 1 is multi-head attention,
// G > 1 Llama's grouped-query attention, whose group dim the attention layers are told:
// tpx::nn::query_groups<G>). Heads are split over Y, so attention itself needs no collective
// (nn/attention.hpp, or with
// config::fused_attention the fused kernels of nn/fused_attention.hpp), nor does rotary
// embedding (nn/rotary.hpp: each rank turns its own heads' pairs by their positions' angles);
// between the blocks the residual stream is split along the sequence over Y (Megatron's sequence
// parallelism), so norms and residual adds run on 1/Y of the tokens, and the AllGather before each
// sublayer and the ReduceScatter after it replace Megatron-TP's AllReduce. With
// config::plain_tensor_parallel the stream is Megatron-TP's instead, x[B_RX, T, D] whole on every
// rank of Y, with h = RMSNorm(x) and x += AllReduce<Y>(o); its gradient is then a partial sum
// over Y, [B_RX, T, D]{U_Y}, and the AllReduce's adjoint (an AllReduce) completes it before each
// sublayer's backward pass (transformer's stream_gradient, enter_sublayer, leave_sublayer).
//
// Every parameter is an fp32 master sharded over X and Y and replicated over R; before use it is
// cast to the compute type and all-gathered (FSDP over X; the norms and embedding tables over Y
// too, as the residual stream needs them whole), and the backward pass applies the adjoint of each
// gather, so every gradient arrives reduce-scattered onto its parameter's sharding, as in the MLP
// trainer (examples/trainer). The batch is split over R and X, so that reduce-scattered gradient is
// still a partial sum over the replicas, {U_R}, which one AllReduce over R per parameter completes
// (HSDP; the seed notes' section 6.2). On a mesh with R = 1 that AllReduce has one member and
// changes no bit: the model then computes exactly the two-axis FSDP + TP model. With
// checkpoint_every = C > 0 only every C-th block input is kept and each segment runs forward again
// during the backward pass (examples/trainer/block_stack.hpp).
//
// Context parallelism (config::context_parallel; tpx-gpt --context-parallel; Llama 3's, in its
// all-gather form) makes X split each sequence instead of the batch: the batch is split over R
// only, the stream is x[B_R, T_XY, D] (each rank of X a block of every row's positions, Y
// splitting the block further between sublayers), a sublayer's input h[B_R, T_X, D], and q
// [B_R, T_X, H_Y, G, E] a block of queries. Attention needs every key before a query, so k and v
// are all-gathered over X to [B_R, S, H_Y, E] (rotary embedding turns them first, each rank its own
// positions); nn/attention.hpp masks by each query's global position, and the types give dk and
// dv as partial sums over X, {U_X}, which the gather's adjoint reduce-scatters back onto the
// rank's block. Everything else is unchanged, the types carrying it: a weight's gradient
// contracts B_R and T_X and so is {U_RX}, as the data-parallel model's is over B_RX, reduce-
// scattered over X (FSDP) and all-reduced over R alike. Activation memory per rank is then 1/X of
// a sequence's, which is what lets long sequences fit; the price is the gather of k and v and the
// reduce-scatter of their gradients per block, over X. The reference attention computes every
// score of a block's rows, masked or not, so contiguous blocks cost every rank the same; the fused
// kernels (config::fused_attention) skip the keys after a block's queries, so there the last block
// of X works longest (X = 4: its share of the visible pairs is 7/16, the first's 1/16). With
// config::load_balance the batch holds each sequence in the load-balanced order instead
// (nn/sequence_order.hpp: 2X chunks, rank x of X holding chunks x and 2X-1-x, Megatron's), every
// rank's queries see as many keys, and the layers that depend on positions take the order as a
// type (load_balanced<X>: rotary embedding, the fused attention); the position column carries
// each index's true position to PosE, and the loss, a mean over positions, ignores the order.
//
// Communication can overlap computation (config::overlap; tpx-gpt --overlap on;
// trainer/overlap.hpp, shared with the MLP trainer): a block's weights are gathered together, on
// the rank's communication thread (tpx::in_background; on a CUDA rank, its second stream), one
// block visit ahead in the block loop's order
// (trainer::block_visits: the forward pass, the recomputation of checkpointed segments, the
// backward pass), so block l + 1's all-gathers run while block l computes (the final norm's and
// the head's during the last block's forward pass). A block's gradients are reduce-scattered
// together, started as its backward pass ends, while the next block's runs, as FSDP
// reduce-scatters per unit; all are done before forward_backward returns (so before the optimizer
// step). A block visited twice in a row (the last one, forward then backward) is gathered twice,
// as every visit is: keeping it would be FSDP2's
// reshard_after_forward=False. What stays on the rank's own thread is what the computation needs
// at once: the collectives over Y into and out of each sublayer (the sequence-parallel gathers
// and scatters, or plain TP's AllReduces), the loss's reductions and the embedding tables'
// gathers. With overlap off the same tasks run at once on the rank's thread:
// the same operations on the same data, so the same bits (tests/trainer/gpt_test.cpp checks it).
// Memory: two blocks' gathered weights at a time (the one computing, the next), as in FSDP2's
// default, and a block's partial gradients until its reduce-scatters have run. Off by default:
// on the 2-core machine it was measured on, the communication threads take cores from the
// computation and cost 14-23% of the throughput (examples/gpt/README.md).
//
// The tokens it reads are batch.hpp's; its config, mesh and dims config.hpp's; its parameters
// parameters.hpp's.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tpx/nn/attention.hpp>
#include <tpx/nn/cross_entropy.hpp>
#include <tpx/nn/embedding.hpp>
#include <tpx/nn/fused_attention.hpp>
#include <tpx/nn/gelu_product.hpp>
#include <tpx/nn/rmsnorm.hpp>
#include <tpx/nn/rotary.hpp>
#include <tpx/spmd/background.hpp>
#include <tpx/spmd/phase_clock.hpp>
#include <tpx/tpx.hpp>
#include <type_traits>
#include <variant>
#include <vector>

#include "../trainer/block_stack.hpp"
#include "../trainer/overlap.hpp"
#include "batch.hpp"
#include "config.hpp"
#include "parameters.hpp"
#include "step_chain.hpp"

namespace gpt {

using tpx::AllGather;
using tpx::ReduceScatter;

// How the model splits its activations: the residual stream split along the sequence over Y
// (sequence parallel) or whole on every rank of Y (plain tensor parallel), and X splitting the
// batch (data parallel: both of those) or each sequence (context parallel, on the
// sequence-parallel stream).
enum class layout { sequence_parallel, plain_tensor_parallel, context_parallel };

// Forward and backward passes in compute type Tc (float or tpx::bf16), on tensors of Space, in
// one layout; model below chooses by the config.
template <class Tc, class Space, layout Layout>
class transformer {
  static constexpr bool SequenceParallel = Layout != layout::plain_tensor_parallel;
  static constexpr bool ContextParallel = Layout == layout::context_parallel;

 public:
  template <class T, class... Spec>
  using Tensor = tpx::BasicTensor<Space, T, Spec...>;
  using params = model_tensors<Space>;
  using scalar = Tensor<float>;
  // How the batch dim is split, and the positions of a sublayer (its queries): every row's whole
  // sequence on the ranks of X that hold the row, or (context parallel) every row, a block of
  // its sequence on each rank of X.
  using rows = std::conditional_t<ContextParallel, B<R>, B<R, X>>;
  using positions = std::conditional_t<ContextParallel, T<X>, T<>>;
  // The residual stream between sublayers and its gradient. Split along the sequence, each rank's
  // gradient is its tokens' whole gradient; whole on every rank of Y, the stream's gradient is
  // a partial sum over Y (sharding/steps.hpp's convention: each rank holds the contribution of
  // its heads, its MLP columns and its vocabulary shard), which the norms' and the embeddings'
  // backward passes, linear in it, take as it is.
  using stream_positions =
      std::conditional_t<SequenceParallel,
                         std::conditional_t<ContextParallel, T<X, Y>, T<Y>>, positions>;
  using stream = Tensor<Tc, rows, stream_positions, D<>>;
  using stream_gradient = std::conditional_t<SequenceParallel, stream,
                                             Tensor<Tc, rows, T<>, D<>, tpx::Unreduced<Y>>>;

  // The forward pass's collectives, as types; the backward pass applies their adjoints.
  using gather_weight = step_chain<AllGather<X, D<>>>;  // FSDP: every matrix is split on D over X
  using gather_norm = step_chain<AllGather<X, D<>>, AllGather<Y, D<>>>;   // [D_YX] -> [D]
  using gather_table = step_chain<AllGather<X, V<>>, AllGather<Y, D<>>>;  // [V_X, D_Y] -> [V, D]
  using gather_positions = step_chain<AllGather<X, T<>>, AllGather<Y, D<>>>;
  // The stream into a sublayer's input [B_RX, T, D]: SP gathers the sequence, plain TP has it
  // already (and its adjoint leaves the input's gradient, {U_Y}, as it is).
  using enter_sublayer =
      std::conditional_t<SequenceParallel, step_chain<AllGather<Y, T<>>>, step_chain<>>;
  // A sublayer's output, a partial sum over Y ({U_Y}: Wo and Wout are split by rows), into the
  // stream: SP reduce-scatters it along the sequence, plain TP all-reduces it (and the adjoint,
  // an AllReduce too, completes the stream's gradient before the sublayer's backward pass).
  using leave_sublayer = std::conditional_t<SequenceParallel, step_chain<ReduceScatter<Y, T<>>>,
                                            step_chain<tpx::AllReduce<Y>>>;
  // Keys and values [B, S, H_Y, E] for attention: context parallelism gathers every position of
  // the sequence over X (its adjoint reduce-scatters their gradients, each rank's queries'
  // share, back onto the blocks); otherwise a rank has them all.
  using gather_keys =
      std::conditional_t<ContextParallel, step_chain<AllGather<X, S<>>>, step_chain<>>;

  transformer(const tpx::rank_context& rank, const config& c) : rank_(rank), c_(c) {}

  // Loss of the global batch (the same scalar on every rank, in Space); grads receives each
  // parameter's gradient, reduce-scattered onto the parameter's sharding and summed over R.
  // (Defined below the class, not inline, so that a file can declare its instantiations extern
  // and link them from the one file that compiles them: TPX_GPT_LAYOUTS below.)
  scalar forward_backward(const params& p, const batch<Space>& tokens, params& grads) const;

  // The logits [B_RX, T, V_Y] of every position of the batch's input bytes: forward_backward's
  // passes up to the LM head, nothing kept for a backward pass and nothing overlapped (text
  // generation, generation.hpp). Compiled only where it is called.
  auto logits(const params& p, const batch<Space>& tokens) const {
    stream x = embed_forward(p, tokens_of(tokens));
    for (std::size_t l = 0; l < p.norm1.size(); ++l)
      x = std::move(block_forward(gather_block(p, static_cast<int>(l)), x).out);
    return head_forward(gather_head(p), x).logits;
  }

 private:
  // The parameter cast to the compute type (in fp32: as it is), then all-gathered by Chain.
  template <class Chain, class P>
  auto gathered(const P& master) const {
    if constexpr (std::is_same_v<Tc, typename P::value_type>)
      return Chain::forward(master);
    else
      return Chain::forward(tpx::cast<Tc>(master));
  }

  // A parameter's gradient from the partial sum the backward pass made of it over the rows this
  // rank saw, {U_RX..}: the adjoint of the parameter's gather Chain reduce-scatters it onto the
  // master's shards over X (and Y), in the compute type; what is left, {U_R}, is each replica's
  // share of the gradient, and AllReduce<R> sums the replicas' shards (HSDP: 1/(X Y) of the
  // parameter crosses R, not all of it). Then fp32, the masters' type.
  template <class Chain, class Partial>
  static auto parameter_gradient(Partial&& partial) {
    return tpx::cast<float>(tpx::all_reduce<R>(Chain::backward(std::forward<Partial>(partial))));
  }

  // The batch's tokens in this model's layouts (load_batch makes those of the config).
  using batch_tokens = typename std::conditional_t<ContextParallel, decltype(batch<Space>::blocks),
                                                   decltype(batch<Space>::rows)>::value_type;
  static const batch_tokens& layouts_of(const batch<Space>& b) {
    const auto& layouts = [&]() -> const auto& {
      if constexpr (ContextParallel)
        return b.blocks;
      else
        return b.rows;
    }();
    if (!layouts)
      throw std::invalid_argument(
          std::string("gpt: a batch loaded for ") +
          (ContextParallel ? "data" : "context") + " parallelism over X, given to a " +
          (ContextParallel ? "context" : "data") + "-parallel model (load it with its config)");
    return *layouts;
  }
  // The batch's tokens split like the stream.
  using sublayer_tokens = decltype(batch_tokens::sublayer);
  using stream_tokens =
      std::conditional_t<SequenceParallel, decltype(batch_tokens::stream), sublayer_tokens>;
  static const stream_tokens& tokens_of(const batch<Space>& b) {
    if constexpr (SequenceParallel)
      return layouts_of(b).stream;
    else
      return layouts_of(b).sublayer;
  }

  // x = TokE[byte] + PosE[t] ([B_RX, T_Y, D] with SP): two row lookups into the gathered tables;
  // with rotary embedding, TokE[byte] alone.
  stream embed_forward(const params& p, const stream_tokens& tokens) const {
    stream x(rank_, {B(c_.batch), T(c_.seq), D(c_.d_model())});
    tpx::nn::embedding_add(x, gathered<gather_table>(p.token_embed), tokens, input_byte);
    if (p.position_embed)
      tpx::nn::embedding_add(x, gathered<gather_positions>(*p.position_embed), tokens, position);
    return x;
  }

  // The gradients' reduce-scatters (trainer::gradient_reductions: started per block, as FSDP
  // reduce-scatters per unit), each partial gradient becoming parameter_gradient's.
  struct parameter_reduction {
    template <class Chain, class Partial>
    static auto gradient(Partial&& partial) {
      return parameter_gradient<Chain>(std::forward<Partial>(partial));
    }
  };
  using gradient_reductions = trainer::gradient_reductions<parameter_reduction>;

  // The tables' gradients: [V, D]{U_RXY} and [T, D]{U_RXY} (each rank saw its rows), reduced
  // onto the tables' shards [V_X, D_Y] and [T_X, D_Y] and over the replicas.
  void embed_backward(const stream_tokens& tokens, const stream_gradient& dx, params& grads,
                      gradient_reductions& reductions) const {
    reductions.add(gather_table{}, grads.token_embed,
                   tpx::nn::embedding_gradient<V>(dx, tokens, input_byte, c_.vocab));
    if (grads.position_embed)
      reductions.add(gather_positions{}, *grads.position_embed,
                     tpx::nn::embedding_gradient<T>(dx, tokens, position, c_.seq));
    reductions.start();
  }

  // A block's parameters cast to the compute type and all-gathered: what its forward and
  // backward passes multiply by. Gathered in this order, norm1 first.
  struct block_weights {
    Tensor<Tc, D<>> norm1;
    Tensor<Tc, D<>, H<Y>, G<>, E<>> wq;
    Tensor<Tc, D<>, H<Y>, E<>> wk, wv;
    Tensor<Tc, H<Y>, G<>, E<>, D<>> wo;
    Tensor<Tc, D<>> norm2;
    Tensor<Tc, D<>, F<Y>> w_in;
    std::optional<Tensor<Tc, D<>, F<Y>>> w_gate;  // with config::swiglu
    Tensor<Tc, F<Y>, D<>> w_out;
  };

  block_weights gather_block(const params& p, int l) const {
    block_weights w{gathered<gather_norm>(p.norm1[l]),  gathered<gather_weight>(p.wq[l]),
                    gathered<gather_weight>(p.wk[l]),   gathered<gather_weight>(p.wv[l]),
                    gathered<gather_weight>(p.wo[l]),   gathered<gather_norm>(p.norm2[l]),
                    gathered<gather_weight>(p.w_in[l]), std::nullopt,
                    gathered<gather_weight>(p.w_out[l])};
    if (c_.swiglu) w.w_gate.emplace(gathered<gather_weight>(p.w_gate[l]));
    return w;
  }

  // Attention's operands come from the projections as [B, T, H, G, E] (q) and [B, S, H, E] (k,
  // v), and its output and gradients are needed in those layouts, where the products with the
  // weights (Wo's, and the weights' gradients and dh1) run without copying (einsum's plans say
  // "Transpose" where an operand must be copied first). The fused kernels read and write them in
  // place; the reference's products read heads first, [B, H, T, G, E] and [B, H, S, E], so its
  // path copies q, k, v there once and keeps them for the backward pass, and copies its results
  // back once each.
  // With context parallelism a sublayer's positions are the rank's block of each sequence along
  // X, and so are q's; k and v are gathered to every position (gather_keys) before attention.
  using whole = Tensor<Tc, rows, positions, D<>>;         // a sublayer's input, sequence gathered
  using tokens = Tensor<Tc, rows, positions, H<Y>, G<>, E<>>;  // q, attention's output, dq
  using key_tokens = Tensor<Tc, rows, positions, H<Y>, E<>>;   // dk, dv at the projections
  using projected_keys = decltype(tpx::rename<T, S>(std::declval<key_tokens>()));  // k, v
  using token_keys = Tensor<Tc, rows, S<>, H<Y>, E<>>;  // k and v as attention reads them
  // Their gradients from attention: each rank's queries' share of every key's, over X, when the
  // sequence is split there.
  using key_gradient =
      std::conditional_t<ContextParallel, Tensor<Tc, rows, S<>, H<Y>, E<>, tpx::Unreduced<X>>,
                         token_keys>;
  using heads = Tensor<Tc, rows, H<Y>, positions, G<>, E<>>;  // the reference's q
  using keys = Tensor<Tc, rows, H<Y>, S<>, E<>>;         // the reference's k and v
  using rstd = tpx::nn::per_row_t<stream>;
  // Attention's output and what its backward pass needs (config::fused_attention): the fused
  // kernels' operands as projected and the log-sum-exp of each query row, or the reference's
  // operands heads first and its probabilities.
  struct fused_saved {
    tokens q;
    token_keys k, v;
    Tensor<float, rows, positions, H<Y>, G<>> lse;
  };
  struct reference_saved {
    heads q;
    keys k, v;
    Tensor<Tc, rows, H<Y>, positions, G<>, S<>> probs;
  };
  struct attention_state {
    tokens out;
    std::optional<fused_saved> fused;
    std::optional<reference_saved> reference;
  };
  struct attention_gradients {
    tokens dq;
    key_gradient dk, dv;
  };

  // f called with the order of the sequence's positions as a type: the load-balanced order over
  // X (config::load_balance) or positions in order.
  template <class F>
  decltype(auto) in_sequence_order(F&& f) const {
    if constexpr (ContextParallel)
      if (c_.load_balance) return f(tpx::nn::load_balanced<X>{});
    return f(tpx::nn::contiguous_positions{});
  }

  using groups = tpx::nn::query_groups<G>;

  attention_state attend(tokens q, token_keys k, token_keys v) const {
    if (c_.fused_attention) {
      auto f = in_sequence_order([&]<class Order>(Order) {
        return tpx::nn::fused_causal_attention_forward<Order, groups>(q, k, v);
      });
      return {std::move(f.out),
              fused_saved{std::move(q), std::move(k), std::move(v), std::move(f.lse)},
              std::nullopt};
    }
    // Each projection is released as soon as it is copied heads first.
    heads hq = [](tokens t) { return tpx::permute<B, H, T, G, E>(t); }(std::move(q));
    const auto keys_first = [](token_keys t) { return tpx::permute<B, H, S, E>(t); };
    keys hk = keys_first(std::move(k)), hv = keys_first(std::move(v));
    auto f = tpx::nn::causal_attention_forward<groups>(hq, hk, hv);
    return {tpx::permute<B, T, H, G, E>(f.out), std::nullopt,
            reference_saved{std::move(hq), std::move(hk), std::move(hv), std::move(f.probs)}};
  }

  attention_gradients attend_backward(const attention_state& a, const tokens& dout) const {
    if (a.fused) {
      const fused_saved& f = *a.fused;
      auto g = in_sequence_order([&]<class Order>(Order) {
        return tpx::nn::fused_causal_attention_backward<Order, groups>(f.q, f.k, f.v, a.out, f.lse,
                                                                       dout);
      });
      return {std::move(g.dq), std::move(g.dk), std::move(g.dv)};
    }
    const reference_saved& r = *a.reference;
    auto g = tpx::nn::causal_attention_backward<groups>(r.q, r.k, r.v, r.probs,
                                                        tpx::permute<B, H, T, G, E>(dout));
    // Each heads-first gradient is released as soon as it is copied.
    const auto keys_first = [](auto t) { return tpx::permute<B, S, H, E>(t); };
    return {tpx::permute<B, T, H, G, E>(std::move(g.dq)), keys_first(std::move(g.dk)),
            keys_first(std::move(g.dv))};
  }

  struct block_state {
    stream x;                                          // block input
    rstd rstd1;                                        // RMSNorm statistics before attention
    whole h1;                                          // normalized input, its sequence whole
    attention_state att;                               // attention output, what its backward needs
    stream mid;                                        // input + attention
    rstd rstd2;                                        // RMSNorm statistics before the MLP
    whole h2;                                          // normalized mid, its sequence whole
    Tensor<Tc, rows, positions, F<Y>> a;                  // MLP pre-activation (SwiGLU: gate's)
    std::optional<Tensor<Tc, rows, positions, F<Y>>> up;  // SwiGLU's h2 Win
    Tensor<Tc, rows, positions, F<Y>> g;  // GELU(a), or silu(a) * up: Wout's input
    stream out;                                        // mid + MLP
  };

  // Each part marks its phase (tpx::mark_phase, timed by --profile-phases); a phase holds the
  // collectives over Y into and out of the sublayer that its part calls.
  block_state block_forward(const block_weights& w, const stream& x) const {
    tpx::mark_phase("attention norm");
    auto n1 = tpx::nn::rmsnorm_forward(x, w.norm1);
    whole h1 = enter_sublayer::forward(std::move(n1.y));
    tpx::mark_phase("QKV projections");
    tokens q = tpx::einsum<D>(h1, w.wq);  // [B_RX, T, H_Y, G, E]
    projected_keys k = tpx::rename<T, S>(tpx::einsum<D>(h1, w.wk));
    projected_keys v = tpx::rename<T, S>(tpx::einsum<D>(h1, w.wv));
    if (c_.rope) {  // each rank turns its own positions, before the gather
      tpx::mark_phase("rotary embedding");
      in_sequence_order([&]<class Order>(Order) {
        q = tpx::nn::rotary_forward<T, Order>(std::move(q));
        k = tpx::nn::rotary_forward<S, Order>(std::move(k));
      });
    }
    if constexpr (ContextParallel) tpx::mark_phase("key and value gather");
    token_keys k_all = gather_keys::forward(std::move(k));
    token_keys v_all = gather_keys::forward(std::move(v));
    tpx::mark_phase("attention");
    attention_state att = attend(std::move(q), std::move(k_all), std::move(v_all));
    // [B_RX, T, H_Y, G, E] *_{H, G, E} [H_Y, G, E, D]: a partial sum over Y, reduced into the
    // stream.
    tpx::mark_phase("attention output");
    stream mid = tpx::add(x, leave_sublayer::forward(tpx::einsum<H, G, E>(att.out, w.wo)));
    tpx::mark_phase("MLP norm");
    auto n2 = tpx::nn::rmsnorm_forward(mid, w.norm2);
    whole h2 = enter_sublayer::forward(std::move(n2.y));
    tpx::mark_phase(w.w_gate ? "MLP up (SwiGLU)" : "MLP up (GELU)");
    auto [a, up, g] = mlp_up(w, h2);
    tpx::mark_phase("MLP down");
    stream out = tpx::add(mid, leave_sublayer::forward(tpx::einsum<F>(g, w.w_out)));
    return {x,
            std::move(n1.rstd),
            std::move(h1),
            std::move(att),
            std::move(mid),
            std::move(n2.rstd),
            std::move(h2),
            std::move(a),
            std::move(up),
            std::move(g),
            std::move(out)};
  }

  // The MLP's activations [B_RX, T, F_Y] up to Wout's input: GELU(h2 Win), the GELU fused into
  // the GEMM; or SwiGLU's gate a = h2 Wgate, up = h2 Win and silu(a) * up.
  using mlp_activation = Tensor<Tc, rows, positions, F<Y>>;
  struct mlp_activations {
    mlp_activation a;
    std::optional<mlp_activation> up;
    mlp_activation g;
  };
  mlp_activations mlp_up(const block_weights& w, const whole& h2) const {
    if (!w.w_gate) {
      auto up = tpx::nn::gelu_product<D>(h2, w.w_in);
      return {std::move(up.pre), std::nullopt, std::move(up.out)};
    }
    mlp_activation a = tpx::einsum<D>(h2, *w.w_gate);
    mlp_activation up = tpx::einsum<D>(h2, w.w_in);
    mlp_activation g = tpx::map(tpx::kernels::silu_product{}, a, up);
    return {std::move(a), std::move(up), std::move(g)};
  }

  // The MLP's backward from do2 [B_RX, T, D] to dh2 [B_RX, T, D]{U_Y} (before leaving the
  // sublayer's gather), adding the up projections' weight gradients to the reductions.
  auto mlp_up_backward(const block_weights& w, int l, const block_state& s, const whole& do2,
                       params& grads, gradient_reductions& reductions) const {
    if (!w.w_gate) {
      // (do2 *_D Wout) * GELU'(a): [B_RX, T, F_Y], GELU' fused into the GEMM
      const auto da = tpx::nn::gelu_product_backward<D>(s.a, do2, w.w_out);
      reductions.add(gather_weight{}, grads.w_in[l], tpx::einsum<B, T>(s.h2, da));  // [D_X, F_Y]
      return tpx::einsum<F>(da, w.w_in);
    }
    // dg = do2 *_D Wout; the gate's gradient dg * up * silu'(a), up's dg * silu(a).
    const mlp_activation dg = tpx::einsum<D>(do2, w.w_out);
    const mlp_activation da = tpx::map(tpx::kernels::silu_product_gate_backward{}, s.a, *s.up, dg);
    const mlp_activation dup = tpx::map(tpx::kernels::silu_product_up_backward{}, s.a, dg);
    reductions.add(gather_weight{}, grads.w_gate[l], tpx::einsum<B, T>(s.h2, da));  // [D_X, F_Y]
    reductions.add(gather_weight{}, grads.w_in[l], tpx::einsum<B, T>(s.h2, dup));
    return tpx::add(tpx::einsum<F>(da, *w.w_gate), tpx::einsum<F>(dup, w.w_in));
  }

  // A weight's partial gradient is the contraction over the rows (B, T) that the forward pass's
  // product summed out, a partial sum over R and X, e.g. [F_Y, D]{U_RX} (reduced onto the
  // master's shards and over the replicas).
  stream_gradient block_backward(const block_weights& w, int l, const block_state& s,
                                 const stream_gradient& dout, params& grads,
                                 gradient_reductions& reductions) const {
    // MLP: out = mid + leave(g Wout), g = GELU(h2 Win) or silu(h2 Wgate) * (h2 Win)
    tpx::mark_phase("MLP down backward");
    const whole do2 = leave_sublayer::backward(dout);                              // [B_RX, T, D]
    reductions.add(gather_weight{}, grads.w_out[l], tpx::einsum<B, T>(s.g, do2));  // [F_Y, D_X]
    tpx::mark_phase("MLP up backward");
    const stream_gradient dh2 =
        enter_sublayer::backward(mlp_up_backward(w, l, s, do2, grads, reductions));
    tpx::mark_phase("MLP norm backward");
    auto dn2 = tpx::nn::rmsnorm_backward(s.mid, w.norm2, s.rstd2, dh2);
    reductions.add(gather_norm{}, grads.norm2[l], std::move(dn2.dw));
    const stream_gradient dmid = tpx::add(dout, dn2.dx);

    // Attention: mid = x + leave(attention(q, k, v) Wo)
    tpx::mark_phase("attention output backward");
    const whole do1 = leave_sublayer::backward(dmid);
    reductions.add(gather_weight{}, grads.wo[l],
                   tpx::einsum<B, T>(s.att.out, do1));  // [H_Y, G, E, D_X]
    const tokens datt = tpx::einsum<D>(do1, w.wo);
    // dq [B_RX, T, H_Y, G, E]; dk, dv [B_RX, S, H_Y, E], with context parallelism partial sums
    // over X, reduce-scattered onto the rank's positions
    tpx::mark_phase("attention backward");
    attention_gradients g = attend_backward(s.att, datt);
    if constexpr (ContextParallel) tpx::mark_phase("key and value gradient reduce-scatter");
    tokens dq = std::move(g.dq);
    key_tokens dk = tpx::rename<S, T>(gather_keys::backward(std::move(g.dk)));
    key_tokens dv = tpx::rename<S, T>(gather_keys::backward(std::move(g.dv)));
    if (c_.rope) {  // the gradients at the projections' outputs, turned back
      tpx::mark_phase("rotary embedding backward");
      in_sequence_order([&]<class Order>(Order) {
        dq = tpx::nn::rotary_backward<T, Order>(std::move(dq));
        dk = tpx::nn::rotary_backward<T, Order>(std::move(dk));
      });
    }
    tpx::mark_phase("QKV backward");
    reductions.add(gather_weight{}, grads.wq[l], tpx::einsum<B, T>(s.h1, dq));  // [D_X, H_Y, G, E]
    reductions.add(gather_weight{}, grads.wk[l], tpx::einsum<B, T>(s.h1, dk));
    reductions.add(gather_weight{}, grads.wv[l], tpx::einsum<B, T>(s.h1, dv));
    // dh1 = sum over q, k, v of d(proj) *_{H, (G,) E} W: partial sums over Y, added, then the
    // adjoint of entering the sublayer.
    const stream_gradient dh1 = enter_sublayer::backward(
        tpx::add(tpx::add(tpx::einsum<H, G, E>(dq, w.wq), tpx::einsum<H, E>(dk, w.wk)),
                 tpx::einsum<H, E>(dv, w.wv)));
    tpx::mark_phase("attention norm backward");
    auto dn1 = tpx::nn::rmsnorm_backward(s.x, w.norm1, s.rstd1, dh1);
    reductions.add(gather_norm{}, grads.norm1[l], std::move(dn1.dw));
    reductions.start();
    return tpx::add(dmid, dn1.dx);
  }

  struct head_result {
    scalar loss;
    stream_gradient dx;
  };

  // The final norm and the LM head, gathered.
  struct head_weights {
    Tensor<Tc, D<>> norm;
    Tensor<Tc, D<>, V<Y>> head;
  };
  head_weights gather_head(const params& p) const {
    return {gathered<gather_norm>(p.final_norm), gathered<gather_weight>(p.head)};
  }

  // Final norm, logits [B_RX, T, V_Y] (the vocabulary stays split: nn/cross_entropy's
  // vocab-parallel loss), mean cross-entropy over every position, and their backward pass.
  // The final norm's statistics and output (its sequence whole) and the logits [B_RX, T, V_Y]:
  // the training step's and generation's (logits) forward pass of the head.
  struct head_activations {
    rstd norm_rstd;
    whole h;
    Tensor<Tc, rows, positions, V<Y>> logits;
  };
  head_activations head_forward(const head_weights& w, const stream& x) const {
    tpx::mark_phase("final norm");
    auto normed = tpx::nn::rmsnorm_forward(x, w.norm);
    whole h = enter_sublayer::forward(std::move(normed.y));
    tpx::mark_phase("LM head");
    auto logits = tpx::einsum<D>(h, w.head);
    return {std::move(normed.rstd), std::move(h), std::move(logits)};
  }

  head_result head_forward_backward(const head_weights& w, const stream& x,
                                    const sublayer_tokens& tokens, params& grads,
                                    gradient_reductions& reductions) const {
    head_activations a = head_forward(w, x);
    // Logits [B_RX, T, V_Y], handed over: their gradient is written in their place.
    tpx::mark_phase("cross-entropy");
    auto ce = tpx::nn::cross_entropy(std::move(a.logits), tokens, target_byte);
    tpx::mark_phase("LM head backward");
    reductions.add(gather_weight{}, grads.head, tpx::einsum<B, T>(a.h, ce.dlogits));  // [D_X, V_Y]
    const stream_gradient dh = enter_sublayer::backward(tpx::einsum<V>(ce.dlogits, w.head));
    tpx::mark_phase("final norm backward");
    auto dnorm = tpx::nn::rmsnorm_backward(x, w.norm, a.norm_rstd, dh);
    reductions.add(gather_norm{}, grads.final_norm, std::move(dnorm.dw));
    reductions.start();
    return {std::move(ce.loss), std::move(dnorm.dx)};
  }

  const tpx::rank_context& rank_;
  config c_;
};

template <class Tc, class Space, layout Layout>
auto transformer<Tc, Space, Layout>::forward_backward(
    const params& p, const batch<Space>& tokens, params& grads) const -> scalar {
  const int layers = static_cast<int>(p.norm1.size());
  trainer::prefetched_blocks<block_weights> weights(
      rank_, c_.overlap, [this, &p](int l) { return gather_block(p, l); },
      trainer::block_visits(layers, c_.checkpoint_every));
  std::optional<tpx::pending<head_weights>> head;
  gradient_reductions reductions(rank_, c_.overlap);
  std::optional<scalar> loss;
  tpx::mark_phase("embedding forward");
  const stream_gradient dx = trainer::stack_forward_backward(
      layers, c_.checkpoint_every, embed_forward(p, tokens_of(tokens)),
      [&](int l, const stream& x) {
        if (l + 1 == layers && !head)
          head = trainer::start_task(rank_, c_.overlap, [this, &p] { return gather_head(p); });
        tpx::mark_phase("block weights");
        return block_forward(weights.take(l), x);
      },
      [&](const stream& x) {
        head_result h =
            head_forward_backward(head->get(), x, layouts_of(tokens).sublayer, grads, reductions);
        loss = std::move(h.loss);
        return std::move(h.dx);
      },
      [&](int l, const block_state& s, const stream_gradient& dout) {
        tpx::mark_phase("block weights");
        return block_backward(weights.take(l), l, s, dout, grads, reductions);
      });
  tpx::mark_phase("embedding backward");
  embed_backward(tokens_of(tokens), dx, grads, reductions);
  tpx::mark_phase("gradient reductions (wait)");
  reductions.wait();
  return std::move(*loss);
}

// TPX_GPT_FORWARD_BACKWARD(Tc, Space, Layout) names transformer's forward_backward in a layout as
// an explicit instantiation does, and TPX_GPT_LAYOUTS(prefix, Tc, Space) declares it in each
// layout: `TPX_GPT_LAYOUTS(extern template, float, tpx::host_space);` where it is used,
// `TPX_GPT_LAYOUTS(template, float, tpx::host_space);` in the file that compiles it
// (host_ranks.hpp and host_model_*.cpp, device_ranks.hpp and device_model.cu, dry_run_model.*).
#define TPX_GPT_FORWARD_BACKWARD(Tc, Space, Layout)                                           \
  gpt::transformer<Tc, Space, gpt::layout::Layout>::scalar                                    \
  gpt::transformer<Tc, Space, gpt::layout::Layout>::forward_backward(                         \
      const gpt::model_tensors<Space>&, const gpt::batch<Space>&, gpt::model_tensors<Space>&) \
      const
#define TPX_GPT_LAYOUTS(prefix, Tc, Space)                           \
  prefix TPX_GPT_FORWARD_BACKWARD(Tc, Space, sequence_parallel);     \
  prefix TPX_GPT_FORWARD_BACKWARD(Tc, Space, plain_tensor_parallel); \
  prefix TPX_GPT_FORWARD_BACKWARD(Tc, Space, context_parallel)

// The model of config c: the transformer with sequence parallelism, or without it when
// c.plain_tensor_parallel, and with context parallelism when c.context_parallel. All take the
// same parameters and give the same loss and gradients (to rounding: the sums over X and Y run in
// other orders), each from a batch loaded with its config.
template <class Tc, class Space = tpx::host_space>
class model {
 public:
  using params = model_tensors<Space>;
  using scalar = tpx::BasicTensor<Space, float>;

  model(const tpx::rank_context& rank, const config& c) : net_(made(rank, c)) {}

  // Loss of the global batch (the same scalar on every rank, in Space); grads receives each
  // parameter's gradient, reduce-scattered onto the parameter's sharding and summed over R.
  scalar forward_backward(const params& p, const batch<Space>& tokens, params& grads) const {
    return std::visit([&](const auto& net) { return net.forward_backward(p, tokens, grads); },
                      net_);
  }

 private:
  using either = std::variant<transformer<Tc, Space, layout::sequence_parallel>,
                              transformer<Tc, Space, layout::plain_tensor_parallel>,
                              transformer<Tc, Space, layout::context_parallel>>;
  static either made(const tpx::rank_context& rank, const config& c) {
    if (const std::string why = unsupported(c); !why.empty())
      throw std::invalid_argument("gpt: " + why);
    const auto size = [&]<class A>(A) { return rank.axis<A>().size; };
    if (const std::string why = unsupported_on(c, size(R{}), size(X{}), size(Y{})); !why.empty())
      throw std::invalid_argument("gpt: " + why);
    if (c.context_parallel) return either(std::in_place_index<2>, rank, c);
    if (c.plain_tensor_parallel) return either(std::in_place_index<1>, rank, c);
    return either(std::in_place_index<0>, rank, c);
  }

  either net_;  // the transformer with sequence parallelism, the plain one, the context-parallel
};

}  // namespace gpt

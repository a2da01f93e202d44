// A GPT-style decoder-only transformer over bytes, trained with FSDP over mesh axis X, Megatron
// tensor + sequence parallelism over Y and, optionally, pure data parallelism over R (HSDP:
// replicate over R, shard over X): the flagship example's model (issue 11), written with tpx's
// typed ops so that every collective is visible in the types.
//
//   x[B_RX, T_Y, D] = TokE[token] + PosE[t]                        sequence-parallel residual
//   block l:  h  = AllGather<Y, T>(RMSNorm(x))                       [B_RX, T, D]
//             q  = h *_D Wq[D, H_Y, E],  k, v likewise (T renamed S) [B_RX, T, H_Y, E]
//             o  = causal_attention(q, k, v) *_{H,E} Wo[H_Y, E, D]    [B_RX, T, D]{U_Y}
//             x += ReduceScatter<Y, T>(o)                            [B_RX, T_Y, D]
//             h  = AllGather<Y, T>(RMSNorm(x))
//             x += ReduceScatter<Y, T>(GELU(h *_D Win[D, F_Y]) *_F Wout[F_Y, D])
//   logits[B_RX, T, V_Y] = AllGather<Y, T>(RMSNorm(x)) *_D Head[D, V_Y]
//   loss = mean cross-entropy over B and T, over the vocabulary shards (nn/cross_entropy.hpp)
//
// Heads are split over Y, so attention itself needs no collective (nn/attention.hpp, or with
// config::fused_attention the fused kernels of nn/fused_attention.hpp); between
// the blocks the residual stream is split along the sequence over Y (Megatron's sequence
// parallelism), so norms and residual adds run on 1/Y of the tokens, and the AllGather before each
// sublayer and the ReduceScatter after it replace Megatron-TP's AllReduce. Every parameter is an
// fp32 master sharded over X and Y and replicated over R; before use it is cast to the compute
// type and all-gathered (FSDP over X; the norms and embedding tables over Y too, as the residual
// stream needs them whole), and the backward pass applies the adjoint of each gather, so every
// gradient arrives reduce-scattered onto its parameter's sharding, as in the MLP trainer
// (examples/trainer). The batch is split over R and X, so that reduce-scattered gradient is still
// a partial sum over the replicas, {U_R}, which one AllReduce over R per parameter completes
// (HSDP; the seed notes' section 6.2). On a mesh with R = 1 that AllReduce has one member and
// changes no bit: the model then computes exactly the two-axis FSDP + TP model. With
// checkpoint_every = C > 0 only every C-th block input is kept and each segment runs forward again
// during the backward pass (examples/trainer/block_stack.hpp).
//
// Tokens are bytes; a batch is [B, T, W] int32 with three columns per position: the input byte,
// the target byte (the next one) and the position, which indexes PosE through the same embedding
// lookup as the bytes. The model reads them twice: split like the residual stream, [B_RX, T_Y, W],
// for the embeddings, and with the sequence whole, [B_RX, T, W], for the loss.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <tpx/nn/attention.hpp>
#include <tpx/nn/cross_entropy.hpp>
#include <tpx/nn/embedding.hpp>
#include <tpx/nn/fused_attention.hpp>
#include <tpx/nn/rmsnorm.hpp>
#include <tpx/tensor/staging.hpp>
#include <tpx/tpx.hpp>
#include <type_traits>
#include <vector>

#include "../trainer/block_stack.hpp"
#include "../trainer/tensor_set.hpp"
#include "../trainer/text_data.hpp"

namespace gpt {

// R: replicas (pure data parallel: HSDP's replicate axis), X: data parallel + FSDP, Y: tensor +
// sequence parallel
TPX_MESH_AXES(R, X, Y);
// batch, query and key positions, model width, heads, head width, MLP width, vocabulary, columns
TPX_DIMS(B, T, S, D, H, E, F, V, W);

using tpx::AllGather;
using tpx::ReduceScatter;

// The model's mesh, R major: ranks that share an R coordinate are consecutive, so that with one
// replica per node the FSDP and TP collectives (over X and Y) stay within a node and only the
// gradients' AllReduce over R crosses nodes. Mesh{1, x, y} is the two-axis FSDP + TP layout.
using mesh = tpx::Mesh<R, X, Y>;

struct config {
  std::int64_t batch = 16;
  std::int64_t seq = 32;
  std::int64_t heads = 4;
  std::int64_t head_dim = 16;
  std::int64_t ffn = 256;
  int layers = 2;
  int checkpoint_every = 0;  // activation checkpointing: keep every C-th block input (0: all)
  std::uint64_t seed = 1;
  // Tokens are bytes, so only the first 256 rows of the embedding and columns of the head are
  // ever used; a larger vocabulary (GPT-2's 50304) sizes them as a real model's, for benchmarks.
  std::int64_t vocab = 256;
  // Attention by the fused kernels (nn/fused_attention.hpp: O(T) memory, the probabilities
  // recomputed in the backward pass) rather than the reference (nn/attention.hpp), which keeps
  // the [T, T] probabilities and is the faster of the two on the host (BLAS GEMMs).
  bool fused_attention = false;
  std::int64_t d_model() const { return heads * head_dim; }
};

// The columns of a batch's token tensor [B, T, W].
enum token_column : std::int64_t { input_byte = 0, target_byte = 1, position = 2, columns = 3 };

// Every parameter-shaped tensor of the model, fp32, in memory space Space: the master weights,
// their gradients and the two Adam moments are each one of these. None is split over R: each
// replica holds the same shards (HSDP), written once to a checkpoint (io/checkpoint_writer.hpp).
template <class Space>
struct model_tensors : trainer::tensor_set<model_tensors<Space>> {
  template <class T, class... Spec>
  using Tensor = tpx::BasicTensor<Space, T, Spec...>;
  using table = Tensor<float, V<X>, D<Y>>;
  using norm = Tensor<float, D<Y, X>>;
  using projection = Tensor<float, D<X>, H<Y>, E<>>;  // Wq, Wk, Wv: column-parallel by heads

  table token_embed;
  Tensor<float, T<X>, D<Y>> position_embed;
  std::vector<norm> norm1, norm2;
  std::vector<projection> wq, wk, wv;
  std::vector<Tensor<float, H<Y>, E<>, D<X>>> wo;  // row-parallel by heads
  std::vector<Tensor<float, D<X>, F<Y>>> w_in;
  std::vector<Tensor<float, F<Y>, D<X>>> w_out;
  norm final_norm;
  Tensor<float, D<X>, V<Y>> head;

  // Zeros of every parameter's shape.
  model_tensors(const tpx::rank_context& rank, const config& c)
      : token_embed(rank, {V(c.vocab), D(c.d_model())}),
        position_embed(rank, {T(c.seq), D(c.d_model())}),
        final_norm(rank, {D(c.d_model())}),
        head(rank, {D(c.d_model()), V(c.vocab)}) {
    const std::int64_t d = c.d_model();
    for (int l = 0; l < c.layers; ++l) {
      norm1.emplace_back(rank, tpx::Shape{D(d)});
      norm2.emplace_back(rank, tpx::Shape{D(d)});
      for (auto* w : {&wq, &wk, &wv})
        w->emplace_back(rank, tpx::Shape{D(d), H(c.heads), E(c.head_dim)});
      wo.emplace_back(rank, tpx::Shape{H(c.heads), E(c.head_dim), D(d)});
      w_in.emplace_back(rank, tpx::Shape{D(d), F(c.ffn)});
      w_out.emplace_back(rank, tpx::Shape{F(c.ffn), D(d)});
    }
  }

  // Every tensor by name, in order (tensor_set::for_each walks it).
  template <class Self, class Fn, class... Others>
  static void visit(Self& self, Fn& f, Others&... others) {
    f(std::string("token_embed"), self.token_embed, others.token_embed...);
    f(std::string("position_embed"), self.position_embed, others.position_embed...);
    for (std::size_t l = 0; l < self.norm1.size(); ++l) {
      const std::string p = "block." + std::to_string(l) + ".";
      f(p + "norm1", self.norm1[l], others.norm1[l]...);
      f(p + "wq", self.wq[l], others.wq[l]...);
      f(p + "wk", self.wk[l], others.wk[l]...);
      f(p + "wv", self.wv[l], others.wv[l]...);
      f(p + "wo", self.wo[l], others.wo[l]...);
      f(p + "norm2", self.norm2[l], others.norm2[l]...);
      f(p + "w_in", self.w_in[l], others.w_in[l]...);
      f(p + "w_out", self.w_out[l], others.w_out[l]...);
    }
    f(std::string("final_norm"), self.final_norm, others.final_norm...);
    f(std::string("head"), self.head, others.head...);
  }
};

template <class Rank>
model_tensors(const Rank&, const config&) -> model_tensors<tpx::space_of_t<Rank>>;

// The initial weights, the same on every mesh: N(0, 1/fan_in) for projections, N(0, 1) for the
// embedding tables, ones for norms.
template <class Space>
void initialize(model_tensors<Space>& p, const config& c) {
  std::uint64_t seed = c.seed * 1000;
  auto normal = [&](auto& t, double fan_in) {
    const float scale = static_cast<float>(1.0 / std::sqrt(fan_in));
    const std::uint64_t s = ++seed;
    trainer::fill_staged(t, [&](std::int64_t i) {
      return scale * tpx::kernels::normal_at(s, static_cast<std::uint64_t>(i));
    });
  };
  auto ones = [](auto& t) { trainer::fill_staged(t, [](std::int64_t) { return 1.0f; }); };
  const auto d = static_cast<double>(c.d_model());
  normal(p.token_embed, 1.0);
  normal(p.position_embed, 1.0);
  for (std::size_t l = 0; l < p.norm1.size(); ++l) {
    ones(p.norm1[l]);
    ones(p.norm2[l]);
    for (auto* w : {&p.wq[l], &p.wk[l], &p.wv[l]}) normal(*w, d);
    normal(p.wo[l], d);
    normal(p.w_in[l], d);
    normal(p.w_out[l], static_cast<double>(c.ffn));
  }
  ones(p.final_norm);
  normal(p.head, d);
}

// A step's batch, twice: split like the residual stream and with the sequence whole.
template <class Space>
struct batch {
  tpx::BasicTensor<Space, std::int32_t, B<R, X>, T<Y>, W<>> stream;
  tpx::BasicTensor<Space, std::int32_t, B<R, X>, T<>, W<>> whole;
};

// The batch of `step`: row b is a window of seq + 1 bytes of the text (trainer::text_data, made
// with context = seq), a function of (seed, step, b) only. Read on the host, copied to Space.
template <class Space>
batch<Space> load_batch(const tpx::rank_context& rank, const trainer::text_data& data,
                        const config& c, std::int64_t step) {
  const auto token = [&](std::int64_t i) -> std::int32_t {
    const std::int64_t column = i % columns, t = (i / columns) % c.seq, b = i / columns / c.seq;
    if (column == position) return static_cast<std::int32_t>(t);
    return data.byte_at(c.seed, step, c.batch, b, static_cast<int>(t + column));
  };
  auto load = [&]<class Tn>(Tn* kind) {
    (void)kind;
    tpx::host_twin_t<Tn> h(rank, {B(c.batch), T(c.seq), W(columns)});
    tpx::fill_with(h, token);
    return tpx::in_space<Space>(std::move(h));
  };
  using Batch = batch<Space>;
  return {load(static_cast<decltype(Batch::stream)*>(nullptr)),
          load(static_cast<decltype(Batch::whole)*>(nullptr))};
}

// A chain of collectives named as types, and its adjoint: the adjoints of the steps in reverse.
template <class... Steps>
struct step_chain {
  template <tpx::AnyTensor Tn>
  static auto forward(const Tn& t) {
    return run<Steps...>(t);
  }
  template <tpx::AnyTensor Tn>
  static auto backward(const Tn& t) {
    return reversed<Steps...>(t);
  }

 private:
  template <class First, class... Rest, class Tn>
  static auto run(const Tn& t) {
    if constexpr (sizeof...(Rest) == 0)
      return tpx::apply<First>(t);
    else
      return run<Rest...>(tpx::apply<First>(t));
  }
  template <class First, class... Rest, class Tn>
  static auto reversed(const Tn& t) {
    if constexpr (sizeof...(Rest) == 0)
      return tpx::apply<tpx::adjoint_t<First>>(t);
    else
      return tpx::apply<tpx::adjoint_t<First>>(reversed<Rest...>(t));
  }
};

// Forward and backward passes in compute type Tc (float or tpx::bf16), on tensors of Space.
template <class Tc, class Space = tpx::host_space>
class model {
 public:
  template <class T, class... Spec>
  using Tensor = tpx::BasicTensor<Space, T, Spec...>;
  using params = model_tensors<Space>;
  using stream = Tensor<Tc, B<R, X>, T<Y>, D<>>;  // the residual stream, split along the sequence
  using scalar = Tensor<float>;

  // The forward pass's collectives, as types; the backward pass applies their adjoints.
  using gather_weight = step_chain<AllGather<X, D<>>>;  // FSDP: every matrix is split on D over X
  using gather_norm = step_chain<AllGather<X, D<>>, AllGather<Y, D<>>>;   // [D_YX] -> [D]
  using gather_table = step_chain<AllGather<X, V<>>, AllGather<Y, D<>>>;  // [V_X, D_Y] -> [V, D]
  using gather_positions = step_chain<AllGather<X, T<>>, AllGather<Y, D<>>>;
  using gather_sequence = step_chain<AllGather<Y, T<>>>;       // SP -> whole sequence
  using scatter_sequence = step_chain<ReduceScatter<Y, T<>>>;  // {U_Y} -> SP

  model(const tpx::rank_context& rank, const config& c) : rank_(rank), c_(c) {}

  // Loss of the global batch (the same scalar on every rank, in Space); grads receives each
  // parameter's gradient, reduce-scattered onto the parameter's sharding and summed over R.
  scalar forward_backward(const params& p, const batch<Space>& tokens, params& grads) const {
    std::optional<scalar> loss;
    const stream dx = trainer::stack_forward_backward(
        static_cast<int>(p.norm1.size()), c_.checkpoint_every, embed_forward(p, tokens.stream),
        [&](int l, const stream& x) { return block_forward(p, l, x); },
        [&](const stream& x) {
          head_result head = head_forward_backward(p, x, tokens.whole, grads);
          loss = std::move(head.loss);
          return std::move(head.dx);
        },
        [&](int l, const block_state& s, const stream& dout) {
          return block_backward(p, l, s, dout, grads);
        });
    embed_backward(tokens.stream, dx, grads);
    return std::move(*loss);
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
  static auto parameter_gradient(const Partial& partial) {
    return tpx::cast<float>(tpx::all_reduce<R>(Chain::backward(partial)));
  }

  using stream_tokens = decltype(batch<Space>::stream);

  // x[B_RX, T_Y, D] = TokE[byte] + PosE[t]: two row lookups into the gathered tables.
  stream embed_forward(const params& p, const stream_tokens& tokens) const {
    stream x(rank_, {B(c_.batch), T(c_.seq), D(c_.d_model())});
    tpx::nn::embedding_add(x, gathered<gather_table>(p.token_embed), tokens, input_byte);
    tpx::nn::embedding_add(x, gathered<gather_positions>(p.position_embed), tokens, position);
    return x;
  }

  // The tables' gradients: [V, D]{U_RXY} and [T, D]{U_RXY} (each rank saw its rows), reduced
  // onto the tables' shards [V_X, D_Y] and [T_X, D_Y] and over the replicas.
  void embed_backward(const stream_tokens& tokens, const stream& dx, params& grads) const {
    grads.token_embed = parameter_gradient<gather_table>(
        tpx::nn::embedding_gradient<V>(dx, tokens, input_byte, c_.vocab));
    grads.position_embed = parameter_gradient<gather_positions>(
        tpx::nn::embedding_gradient<T>(dx, tokens, position, c_.seq));
  }

  using whole = Tensor<Tc, B<R, X>, T<>, D<>>;        // a sublayer's input, sequence gathered
  using heads = Tensor<Tc, B<R, X>, H<Y>, T<>, E<>>;  // attention's output
  using keys = Tensor<Tc, B<R, X>, S<>, H<Y>, E<>>;   // k and v, their positions named S
  using rstd = Tensor<float, B<R, X>, T<Y>>;
  // Attention's output and what its backward pass needs: the reference's probabilities, or the
  // fused kernels' log-sum-exp of each query row (config::fused_attention).
  struct attention_result {
    heads out;
    std::optional<Tensor<Tc, B<R, X>, H<Y>, T<>, S<>>> probs;
    std::optional<Tensor<float, B<R, X>, H<Y>, T<>>> lse;
  };

  attention_result attend(const Tensor<Tc, B<R, X>, T<>, H<Y>, E<>>& q, const keys& k,
                          const keys& v) const {
    if (c_.fused_attention) {
      auto f = tpx::nn::fused_causal_attention_forward(q, k, v);
      return {std::move(f.out), std::nullopt, std::move(f.lse)};
    }
    auto f = tpx::nn::causal_attention_forward(q, k, v);
    return {std::move(f.out), std::move(f.probs), std::nullopt};
  }

  struct block_state {
    stream x;                                   // block input
    rstd rstd1;                                 // RMSNorm statistics before attention
    whole h1;                                   // normalized input, gathered along T
    Tensor<Tc, B<R, X>, T<>, H<Y>, E<>> q;      // queries
    keys k, v;                                  // keys and values
    attention_result att;                       // attention output and what its backward needs
    stream mid;                                 // input + attention
    rstd rstd2;                                 // RMSNorm statistics before the MLP
    whole h2;                                   // normalized mid, gathered along T
    Tensor<Tc, B<R, X>, T<>, F<Y>> a;           // MLP pre-activation
    Tensor<Tc, B<R, X>, T<>, F<Y>> g;           // GELU(a)
    stream out;                                 // mid + MLP
  };

  block_state block_forward(const params& p, int l, const stream& x) const {
    auto n1 = tpx::nn::rmsnorm_forward(x, gathered<gather_norm>(p.norm1[l]));
    whole h1 = gather_sequence::forward(n1.y);
    auto q = tpx::einsum<D>(h1, gathered<gather_weight>(p.wq[l]));  // [B_RX, T, H_Y, E]
    keys k = tpx::rename<T, S>(tpx::einsum<D>(h1, gathered<gather_weight>(p.wk[l])));
    keys v = tpx::rename<T, S>(tpx::einsum<D>(h1, gathered<gather_weight>(p.wv[l])));
    attention_result att = attend(q, k, v);
    // [B_RX, H_Y, T, E] *_{H, E} [H_Y, E, D]: a partial sum over Y, scattered along T.
    stream mid = tpx::add(
        x, scatter_sequence::forward(tpx::einsum<H, E>(att.out, gathered<gather_weight>(p.wo[l]))));
    auto n2 = tpx::nn::rmsnorm_forward(mid, gathered<gather_norm>(p.norm2[l]));
    whole h2 = gather_sequence::forward(n2.y);
    auto a = tpx::einsum<D>(h2, gathered<gather_weight>(p.w_in[l]));  // [B_RX, T, F_Y]
    auto g = tpx::map(tpx::kernels::gelu{}, a);
    stream out = tpx::add(
        mid, scatter_sequence::forward(tpx::einsum<F>(g, gathered<gather_weight>(p.w_out[l]))));
    return {x,
            std::move(n1.rstd),
            std::move(h1),
            std::move(q),
            std::move(k),
            std::move(v),
            std::move(att),
            std::move(mid),
            std::move(n2.rstd),
            std::move(h2),
            std::move(a),
            std::move(g),
            std::move(out)};
  }

  // The gradient of a gathered matrix, from the contraction over the rows (B, T) that the
  // forward pass's product summed out: a partial sum over R and X, e.g. [F_Y, D]{U_RX}.
  template <class Partial>
  static auto weight_gradient(const Partial& partial) {
    return parameter_gradient<gather_weight>(partial);
  }

  stream block_backward(const params& p, int l, const block_state& s, const stream& dout,
                        params& grads) const {
    // MLP: out = mid + RS(GELU(h2 Win) Wout)
    const whole do2 = scatter_sequence::backward(dout);  // [B_RX, T, D]
    const auto w_out = gathered<gather_weight>(p.w_out[l]);
    grads.w_out[l] = weight_gradient(tpx::einsum<B, T>(s.g, do2));  // [F_Y, D_X]
    const auto da =
        tpx::map(tpx::kernels::gelu_backward{}, s.a, tpx::einsum<D>(do2, w_out));  // [B_RX, T, F_Y]
    const auto w_in = gathered<gather_weight>(p.w_in[l]);
    grads.w_in[l] = weight_gradient(tpx::einsum<B, T>(s.h2, da));  // [D_X, F_Y]
    const stream dh2 = gather_sequence::backward(tpx::einsum<F>(da, w_in));
    const auto norm2 = gathered<gather_norm>(p.norm2[l]);
    auto dn2 = tpx::nn::rmsnorm_backward(s.mid, norm2, s.rstd2, dh2);
    grads.norm2[l] = parameter_gradient<gather_norm>(dn2.dw);  // [D]{U_RXY} -> [D_YX]
    const stream dmid = tpx::add(dout, dn2.dx);

    // Attention: mid = x + RS(attention(q, k, v) Wo)
    const whole do1 = scatter_sequence::backward(dmid);
    const auto wo = gathered<gather_weight>(p.wo[l]);
    grads.wo[l] = weight_gradient(tpx::einsum<B, T>(s.att.out, do1));  // [H_Y, E, D_X]
    const auto datt = tpx::einsum<D>(do1, wo);                         // [B_RX, T, H_Y, E]
    auto g = s.att.lse ? tpx::nn::fused_causal_attention_backward(
                             s.q, s.k, s.v, s.att.out, *s.att.lse, tpx::permute<B, H, T, E>(datt))
                       : tpx::nn::causal_attention_backward(s.q, s.k, s.v, *s.att.probs, datt);
    const auto dk = tpx::rename<S, T>(std::move(g.dk));  // [B_RX, H_Y, T, E], as dq
    const auto dv = tpx::rename<S, T>(std::move(g.dv));
    const auto wq = gathered<gather_weight>(p.wq[l]);
    const auto wk = gathered<gather_weight>(p.wk[l]);
    const auto wv = gathered<gather_weight>(p.wv[l]);
    grads.wq[l] = weight_gradient(tpx::einsum<B, T>(s.h1, g.dq));  // [D_X, H_Y, E]
    grads.wk[l] = weight_gradient(tpx::einsum<B, T>(s.h1, dk));
    grads.wv[l] = weight_gradient(tpx::einsum<B, T>(s.h1, dv));
    // dh1 = sum over q, k, v of d(proj) *_{H, E} W: partial sums over Y, added, then scattered.
    const stream dh1 = gather_sequence::backward(
        tpx::add(tpx::add(tpx::einsum<H, E>(g.dq, wq), tpx::einsum<H, E>(dk, wk)),
                 tpx::einsum<H, E>(dv, wv)));
    const auto norm1 = gathered<gather_norm>(p.norm1[l]);
    auto dn1 = tpx::nn::rmsnorm_backward(s.x, norm1, s.rstd1, dh1);
    grads.norm1[l] = parameter_gradient<gather_norm>(dn1.dw);
    return tpx::add(dmid, dn1.dx);
  }

  struct head_result {
    scalar loss;
    stream dx;
  };

  // Final norm, logits [B_RX, T, V_Y] (the vocabulary stays split: nn/cross_entropy's
  // vocab-parallel loss), mean cross-entropy over every position, and their backward pass.
  head_result head_forward_backward(const params& p, const stream& x,
                                    const decltype(batch<Space>::whole)& tokens,
                                    params& grads) const {
    const auto norm = gathered<gather_norm>(p.final_norm);
    auto normed = tpx::nn::rmsnorm_forward(x, norm);
    const whole h = gather_sequence::forward(normed.y);
    const auto head = gathered<gather_weight>(p.head);  // [D, V_Y]
    const auto logits = tpx::einsum<D>(h, head);        // [B_RX, T, V_Y]
    auto ce = tpx::nn::cross_entropy(logits, tokens, target_byte);
    grads.head = weight_gradient(tpx::einsum<B, T>(h, ce.dlogits));  // [D_X, V_Y]
    const stream dh = gather_sequence::backward(tpx::einsum<V>(ce.dlogits, head));
    auto dnorm = tpx::nn::rmsnorm_backward(x, norm, normed.rstd, dh);
    grads.final_norm = parameter_gradient<gather_norm>(dnorm.dw);
    return {std::move(ce.loss), std::move(dnorm.dx)};
  }

  const tpx::rank_context& rank_;
  config c_;
};

}  // namespace gpt

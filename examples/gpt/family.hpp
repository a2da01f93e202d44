// The GPT model (model.hpp) as a model family of the example trainers' shared training loop and
// command line (examples/trainer/training.hpp, cli.hpp): tpx-gpt's model, trained by the same
// AdamW, clipping, checkpoints and logging as tpx-train's MLP.
//
// Model FLOPs per token, the usual accounting (Kaplan et al. 2020; PaLM, appendix B): 6 per
// weight of every matrix product (2 forward, 4 backward) plus 12 L T D for attention's two
// products QK^T and PV (2 T D each per token forward, three times that with backward), counted
// over the whole T x T score matrix as PaLM does. The embedding lookups are not products and do
// not count; recomputation under activation checkpointing does not count either (that is
// hardware FLOPs, not model FLOPs).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <tpx/io/json_integer.hpp>
#include <vector>

#include "../trainer/command_line.hpp"
#include "../trainer/model_family.hpp"
#include "model.hpp"

namespace gpt {

struct family {
  using config = gpt::config;
  using mesh = gpt::mesh;  // Mesh<R, X, Y>: --mesh RxXxY, or XxY for R = 1
  template <class Space>
  using tensors = model_tensors<Space>;
  template <class Tc, class Space>
  using network = model<Tc, Space>;
  static constexpr const char* about = "a byte-level GPT (causal self-attention + MLP blocks)";
  static constexpr const char* overlap_help =
      "on: all-gather each block's weights one block ahead and reduce-scatter gradients on each "
      "rank's communication thread while it computes; off: on the rank's own thread (the same "
      "results, bit for bit)";

  template <class Space>
  static void initialize(tensors<Space>& p, const config& c) {
    gpt::initialize(p, c);
  }
  template <class Space>
  static auto load_batch(const tpx::rank_context& rank, const trainer::text_data& data,
                         const config& c, std::int64_t step) {
    return gpt::load_batch<Space>(rank, data, c, step);
  }
  static int context(const config& c) { return static_cast<int>(c.seq); }
  static nlohmann::json shape(const config& c) {
    return {{"batch", c.batch},
            {"seq", c.seq},
            {"heads", c.heads},
            {"query_group", c.group()},  // query heads per key head: 1 before it was recorded
            {"head_dim", c.head_dim},
            {"ffn", c.ffn},
            {"mlp", c.swiglu ? "swiglu" : "gelu"},
            {"positions", c.rope ? "rotary" : "learned"},
            {"layers", c.layers},
            {"vocab", c.vocab},
            {"seed", c.seed}};
  }
  // The config of a checkpoint's shape (trainer::recorded_shape of the state saved in `where`):
  // what --generate builds its model from. The layout (attention kernels, parallelism) is not the
  // model's and keeps its default.
  static config config_of(const nlohmann::json& recorded, const std::string& where) {
    const auto field = [&](const char* key) { return recorded.at(key); };
    const auto whole = [&]<class T>(const char* key, T& into, T least) {
      into = tpx::io::json_integer<T>(field(key), std::string("the shape's ") + key, where);
      if (into < least)
        throw std::runtime_error("gpt: " + where + ": the shape's " + key + " is " +
                                 std::to_string(into) + ", less than " + std::to_string(least));
    };
    const auto either = [&](const char* key, const char* yes, const char* no) {
      const nlohmann::json value = field(key);
      if (value != yes && value != no)
        throw std::runtime_error("gpt: " + where + ": the shape's " + key + " is " + value.dump() +
                                 ", expected \"" + yes + "\" or \"" + no + "\"");
      return value == yes;
    };
    config c;
    whole("batch", c.batch, std::int64_t{1});
    whole("seq", c.seq, std::int64_t{1});
    whole("heads", c.heads, std::int64_t{1});
    whole("head_dim", c.head_dim, std::int64_t{1});
    whole("ffn", c.ffn, std::int64_t{1});
    whole("layers", c.layers, 1);
    whole("vocab", c.vocab, std::int64_t{256});
    whole("seed", c.seed, std::uint64_t{0});
    std::int64_t group = 1;
    whole("query_group", group, std::int64_t{1});
    if (c.heads % group != 0)
      throw std::runtime_error("gpt: " + where + ": the shape's query_group " +
                               std::to_string(group) + " does not divide its " +
                               std::to_string(c.heads) + " heads");
    c.kv_heads = group == 1 ? 0 : c.heads / group;
    c.swiglu = either("mlp", "swiglu", "gelu");
    c.rope = either("positions", "rotary", "learned");
    return c;
  }
  // tpx-gpt --generate: prints the text the model of the newest valid checkpoint in --ckpt-dir
  // writes (generation.hpp); returns the process's exit code. Compiled in generate.cpp.
  static constexpr bool writes_text = true;
  static int generate_main(const char* program, const trainer::command_line<family>& c);
  // Every position predicts the byte after it.
  static double tokens_per_step(const config& c) { return static_cast<double>(c.batch * c.seq); }
  // The weights of the matrix products: Q, K, V, O and the MLP's two (SwiGLU's three) per block,
  // and the LM head. K and V are D x (key heads x E): D x D without grouped queries.
  static double matrix_weights(const config& c) {
    const double d = static_cast<double>(c.d_model()), f = static_cast<double>(c.ffn);
    const double kv = static_cast<double>(c.key_heads() * c.head_dim);
    const double mlp_matrices = c.swiglu ? 3 : 2;
    return c.layers * (2 * d * d + 2 * d * kv + mlp_matrices * d * f) +
           d * static_cast<double>(c.vocab);
  }
  static double flops_per_step(const config& c) {
    const double attention = 12.0 * c.layers * static_cast<double>(c.seq) * c.d_model();
    return tokens_per_step(c) * (6 * matrix_weights(c) + attention);
  }
  static std::string describe(const config& c) {
    return "batch " + std::to_string(c.batch) + ", T=" + std::to_string(c.seq) +
           ", D=" + std::to_string(c.d_model()) + " (" + std::to_string(c.heads) + " heads of " +
           std::to_string(c.head_dim) +
           (c.group() > 1 ? ", " + std::to_string(c.key_heads()) + " key and value heads" : "") +
           "), F=" + std::to_string(c.ffn) + ", " + std::to_string(c.layers) + " layers" +
           (c.vocab == 256 ? "" : ", V=" + std::to_string(c.vocab)) +
           (c.swiglu ? ", SwiGLU MLP" : "") + (c.rope ? ", rotary positions" : "") +
           (c.fused_attention ? ", fused attention" : "") +
           (c.plain_tensor_parallel ? ", no sequence parallelism" : "") +
           (c.context_parallel ? ", context parallel over X" : "") +
           (c.load_balance ? " (load-balanced)" : "") +
           (c.overlap ? ", FSDP collectives in the background" : "");
  }
  static std::string unsupported(const config& c) { return gpt::unsupported(c); }
  static std::string unsupported_on(const config& c, int r, int x, int y) {
    return gpt::unsupported_on(c, r, x, y);
  }
  // The ranks of an r x x x y mesh that c leaves without work, in a sentence: with fewer rows
  // than the ranks the batch is split over (R and X, or R alone under context parallelism), or
  // fewer key heads than ranks of Y (their query heads go with them), some ranks hold none and
  // wait through the products the others compute.
  static std::string idle_ranks(const config& c, int r, int x, int y) {
    const std::string batch = "--batch " + std::to_string(c.batch);
    std::string idle = c.context_parallel ? trainer::ranks_without_rows(c.batch, r, "R", batch)
                                          : trainer::ranks_without_rows(
                                                c.batch, std::int64_t{r} * x, "R x X", batch);
    if (c.key_heads() < y)
      idle += std::string(idle.empty() ? "" : "; ") +
              "ranks without a key head: " + std::to_string(y - c.key_heads()) + " of each " +
              std::to_string(y) + " of Y (" + std::to_string(c.key_heads()) +
              " key and value heads), which wait through " +
              "attention and its projections (at least " + std::to_string(y) +
              " key heads, or a Y of at most " + std::to_string(c.key_heads()) +
              ", keep each busy)";
    return idle;
  }
  static std::vector<trainer::switch_flag> switch_flags(config& c) {
    return {{"--fused-attention", &c.fused_attention,
             "attention by the fused kernels (tile by tile, O(T) memory; nn/fused_attention.hpp) "
             "instead of the reference that stores the [T, T] probabilities"},
            {"--swiglu", &c.swiglu,
             "the MLP as Llama's SwiGLU, (silu(h Wgate) * (h Win)) Wout, a third matrix split "
             "over Y like Win, instead of GELU(h Win) Wout (set --ffn to about 8/3 D for GELU's "
             "parameter count at 4 D)"},
            {"--rope", &c.rope,
             "rotary position embedding of queries and keys (Llama's RoPE, base 10000; "
             "nn/rotary.hpp) instead of a learned position table added to the token embedding"},
            {"--no-sequence-parallel", &c.plain_tensor_parallel,
             "plain Megatron tensor parallelism over Y: the residual stream whole on every Y rank "
             "(norms and residual adds repeated on each), one AllReduce over Y after each "
             "sublayer, forward and backward, instead of sequence parallelism's AllGather of T "
             "before it and ReduceScatter after it"},
            {"--context-parallel", &c.context_parallel,
             "context parallelism over X: X splits each sequence instead of the batch (each rank "
             "a block of every row's positions), keys and values all-gathered over X before "
             "attention and their gradients reduce-scattered after it"},
            {"--load-balance", &c.load_balance,
             "with --context-parallel and --fused-attention: each sequence in Megatron's "
             "load-balanced order, cut into 2 chunks per rank of X, rank x holding chunks x and "
             "2X-1-x, so that every rank's queries see as many keys (contiguous blocks leave the "
             "last rank of X the most work); --seq a multiple of 2X"}};
  }
  static std::vector<trainer::size_flag> size_flags(config& c) {
    return {{"--seq", &c.seq, "sequence length T (bytes per row; each predicts the next)"},
            {"--heads", &c.heads, "attention (query) heads"},
            {"--kv-heads", &c.kv_heads,
             "key and value heads H (split over Y), each shared by --heads / H query heads: "
             "grouped-query attention, as Llama 2 70B and Llama 3 (0: as many as --heads, "
             "multi-head attention)",
             0},
            {"--head-dim", &c.head_dim, "width of a head E; the model width D is --heads x E"},
            {"--ffn", &c.ffn, "MLP width F"},
            {"--layers", &c.layers, "transformer blocks L"},
            {"--vocab", &c.vocab, "vocabulary V (split over Y); tokens are bytes, so at least 256",
             256}};
  }
};

}  // namespace gpt

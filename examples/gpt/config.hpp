// The GPT example's mesh, dims and config (model.hpp is the model they describe): the mesh axes
// R, X and Y, the logical dims every tensor of the model is written with, the sizes and layout
// choices tpx-gpt's flags set, and which combinations of them the model refuses, in the command
// line's words.
#pragma once

#include <cstdint>
#include <string>
#include <tpx/tpx.hpp>

namespace gpt {

// R: replicas (pure data parallel: HSDP's replicate axis), X: data parallel + FSDP, Y: tensor +
// sequence parallel
TPX_MESH_AXES(R, X, Y);
// batch, query and key positions, model width, key (and value) heads, query heads per key head,
// head width, MLP width, vocabulary, columns
TPX_DIMS(B, T, S, D, H, G, E, F, V, W);

// The model's mesh, R major: ranks that share an R coordinate are consecutive, so that with one
// replica per node the FSDP and TP collectives (over X and Y) stay within a node and only the
// gradients' AllReduce over R crosses nodes. Mesh{1, x, y} is the two-axis FSDP + TP layout.
using mesh = tpx::Mesh<R, X, Y>;

struct config {
  std::int64_t batch = 16;
  std::int64_t seq = 32;
  std::int64_t heads = 4;     // query heads
  std::int64_t kv_heads = 0;  // key and value heads (0: as many as query heads), H over Y
  std::int64_t head_dim = 16;
  std::int64_t ffn = 256;
  int layers = 2;
  int checkpoint_every = 0;  // activation checkpointing: keep every C-th block input (0: all)
  bool overlap = false;      // gathers and gradient reduce-scatters on the communication thread
  std::uint64_t seed = 1;
  // Tokens are bytes, so only the first 256 rows of the embedding and columns of the head are
  // ever used; a larger vocabulary (GPT-2's 50304) sizes them as a real model's, for benchmarks.
  std::int64_t vocab = 256;
  // Rotary position embedding of queries and keys (Llama's, GPT-NeoX's; nn/rotary.hpp, base
  // 10000) instead of the learned position table PosE, which the model then does not have.
  bool rope = false;
  // Attention by the fused kernels (nn/fused_attention.hpp: O(T) memory, the probabilities
  // recomputed in the backward pass) rather than the reference (nn/attention.hpp), which keeps
  // the [T, T] probabilities and is the faster of the two on the host (BLAS GEMMs).
  bool fused_attention = false;
  // Megatron's tensor parallelism without its sequence parallelism: the residual stream whole
  // and the same on every rank of Y, one AllReduce over Y after each sublayer (see model).
  bool plain_tensor_parallel = false;
  // SwiGLU's gated MLP (Llama's) instead of GELU's: a third matrix, Wgate, column-parallel like
  // Win, and silu(h Wgate) * (h Win) where GELU(h Win) was.
  bool swiglu = false;
  // Context parallelism over X (Llama 3's, all-gather based): X splits each sequence instead of
  // the batch, so every rank of X holds a block of every row's positions; keys and values are
  // all-gathered over X before attention and their gradients reduce-scattered after it. With
  // sequence parallelism only; either attention takes a block of queries.
  bool context_parallel = false;
  // Context parallelism's sequences in the load-balanced order (Megatron's, Llama 3's;
  // nn/sequence_order.hpp): each sequence cut into 2 chunks per rank of X, rank x holding chunks x
  // and 2X-1-x, so that every rank's queries see as many keys. With the fused attention only
  // (the reference computes every score of a block, so its blocks cost alike already).
  bool load_balance = false;
  std::int64_t d_model() const { return heads * head_dim; }
  std::int64_t key_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  std::int64_t group() const { return heads / key_heads(); }  // query heads per key head
};

// Why the model cannot be built as c asks, in the command line's words; empty when it can.
inline std::string unsupported(const config& c) {
  if (c.context_parallel && c.plain_tensor_parallel)
    return "--context-parallel needs sequence parallelism (drop --no-sequence-parallel)";
  if (c.load_balance && !c.context_parallel)
    return "--load-balance orders each sequence's chunks over the ranks of context parallelism: "
           "add --context-parallel";
  if (c.load_balance && !c.fused_attention)
    return "--load-balance evens out the fused attention's work (the reference attention "
           "computes every score of a block, so its blocks cost alike): add --fused-attention";
  if (c.kv_heads > 0 && c.heads % c.kv_heads != 0)
    return "--kv-heads " + std::to_string(c.kv_heads) + " must divide --heads " +
           std::to_string(c.heads) + " (each key and value head serves as many query heads)";
  if (c.rope && c.head_dim % 2 != 0)
    return "--rope turns pairs of a head's elements: --head-dim " + std::to_string(c.head_dim) +
           " is odd";
  return {};
}

// Why the model cannot run as c asks on a mesh of r x x x y ranks; empty when it can.
inline std::string unsupported_on(const config& c, int r, int x, int y) {
  (void)r;
  (void)y;
  if (c.load_balance && c.seq % (2 * x) != 0)
    return "--load-balance cuts each sequence into 2 chunks per rank of X: --seq " +
           std::to_string(c.seq) + " is not a multiple of 2 x " + std::to_string(x) + " = " +
           std::to_string(2 * x);
  return {};
}

}  // namespace gpt

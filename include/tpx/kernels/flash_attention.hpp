// Fused causal attention on tensor cores, bf16: the block programs of the CUDA kernels
// (cuda/kernels/flash_attention.hpp), written once for any `Block` that supplies a thread's
// lane and warp, __syncthreads, a warp shuffle and the m16n8k16 mma. On the GPU that is the
// hardware (cuda/kernels/warp_block.hpp); in the host tests it is an emulated block of threads
// (tests/support/simt_block.hpp), so the tiling, masking, online softmax and fragment handling
// run and are checked on a machine without a GPU.
//
// The math is kernels/fused_attention.hpp's (FlashAttention-2's forward and backward), arranged
// as FlashAttention-2 arranges it for tensor cores: a block of 4 warps takes 16 x 4 x R rows,
// each warp R tiles of 16 of them, and walks tiles of Cols rows of the other side staged in
// shared memory, two buffers of them: the next tile is copied in (cp.async) while the block
// computes on the current one (a `tiling` says R and Cols; forward_tiling and backward_tiling are
// the kernels'). A warp with two row tiles uses each fragment it loads from shared memory twice,
// which halves the shared-memory traffic per mma (the forward at widths up to 64; the backward
// passes hold too many accumulators for it).
//   forward  per block of queries: S = Q K^T (Q's fragments stay in registers, or with a
//            tiling's SharedQ are loaded from shared memory for each product), the online
//            softmax on S's accumulators (a row's Cols scores are spread over the 4 lanes of a
//            group: two shuffles find its maximum), then O += P V with P taken from S's
//            accumulators as the A operand; out = O / l, lse = m + log l.
//   dq       per block of 64 queries, over the key tiles it sees: P = exp(S - lse) recomputed,
//            dP = dO V^T, dS = P (dP - delta), dQ += dS K.
//   dk, dv   per block of 64 keys, over the query tiles that see it (t >= s): S^T = K Q^T,
//            P^T, dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q.
//   one pass the dk-dv program that also adds dQ += dS K per query tile (dS^T through shared
//            memory), FlashAttention-2's 5 products per tile where the two passes make 7:
//            a block per split of a sequence's key blocks sums its blocks' dS K into its own
//            share of dq, in key-block order, and a last pass adds the shares in split order,
//            so the sums repeat to the bit without FlashAttention-2's atomics (a candidate the
//            attention-tilings bench times; the layers run the two passes).
// Scores are formed as q . k in fp32 from bf16 products; exponentials are base 2, of scores
// times scale log2(e) (exp2 is the hardware's instruction; every pass folds that multiply and
// the subtraction of the row's max or lse into one fma). Masking (causal, and the end of the
// sequence) costs one 32-bit comparison per score (the last key column each row sees, or each
// key's first query, is found once per tile). The forward runs it only on the tiles that cross
// the diagonal or the sequence's end: a warp decides per tile, all its lanes alike, and most
// tiles need none (in the backward passes a second copy of the tile's code costs registers that
// their occupancy cannot spare). A forward warp skips the key tiles its rows see none of.
// P and dS are rounded to bf16 to enter the second product, as in FlashAttention-2; every sum
// is fp32. Each output element is written by one lane: results do not depend on scheduling.
//
// Shapes: q, k, v, out, dout, dq, dk, dv are rows of E bf16 in the layouts of an attention_shape
// (kernels/fused_attention.hpp): [sequences, T, E], or [B, T, H, E] read in place, a sequence's
// rows then H rows apart; lse and delta are fp32, one per row, in the same order. q, out, dout,
// dq, lse and delta have the query side's layout and k, v, dk, dv the key side's, which differ
// when a rank holds a block of each sequence's queries (context parallelism, and each chunk of
// its load-balanced order): query t of the block, from position `first`, sees keys
// s <= first + t, the key tiles after the block's last query are skipped, and a key block that no
// query of the block sees gets dk = dv = 0. Grouped-query attention (attention_shape::group):
// query sequence b reads key sequence b / group, and a key block's dk and dv add up the query
// tiles of every sequence of its group, one sequence after another. E is HeadDim, a multiple of
// 16 (32, 64, 128 are instantiated).
#pragma once

#include <math.h>  // exp2f, log2f, fmaf, fmaxf, INFINITY

#include <cstddef>
#include <cstdint>

#include "tpx/core/bfloat16.hpp"
#include "tpx/core/config.hpp"
#include "tpx/kernels/fused_attention.hpp"
#include "tpx/kernels/mma_fragments.hpp"

namespace tpx::kernels::flash {

inline constexpr int warps = 4;
inline constexpr int threads = 32 * warps;
inline constexpr int pitch_padding = 8;  // elements after each staged row: the 8 rows
                                         // a fragment load touches fall in distinct banks
inline constexpr float log2e = 1.4426950408889634f;
inline constexpr float ln2 = 0.6931471805599453f;

template <int HeadDim>
inline constexpr int pitch = HeadDim + pitch_padding;

// How a pass divides its work: each of the block's warps takes R tiles of 16 rows (the block's
// rows: its own side, queries for the forward and dq passes, keys for dk-dv), and the rows of
// the other side come staged in tiles of Cols rows (the columns of the score tiles). On the GPU,
// MinBlocks > 0 asks that so many blocks fit on a multiprocessor (the kernel's
// __launch_bounds__): ptxas then keeps the kernel within 65536 / (MinBlocks x threads)
// registers, spilling if it must; 0 leaves the registers to ptxas. With SharedQ the forward
// stages its block's queries in shared memory and loads their fragments for each product
// (FlashAttention-2's layout), instead of keeping them in registers: fewer registers, for wider
// tiles, against more shared-memory reads.
template <int R, int Cols, int MinBlocks = 0, bool SharedQ = false>
struct tiling {
  static_assert(R >= 1 && Cols >= 16 && Cols % 16 == 0 && MinBlocks >= 0,
                "a tiling takes R >= 1 row tiles per warp, staged tiles of a multiple of 16 rows "
                "and MinBlocks >= 0 blocks per multiprocessor (0: no minimum)");
  static constexpr int row_tiles = R;
  static constexpr int block_rows = 16 * warps * R;
  static constexpr int cols = Cols;
  static constexpr int min_blocks = MinBlocks;
  static constexpr bool shared_q = SharedQ;
};

// The tilings the kernels run with. `tpx-bench-cuda attention-tilings` times these beside
// others (bench/cuda/attention_tilings.cu), so that a GPU run can choose among them.
template <int HeadDim>
using forward_tiling = tiling<HeadDim <= 64 ? 2 : 1, 64>;
using backward_tiling = tiling<1, 64>;

// Shared memory each block program needs: two buffers (one computed on while the next tile is
// copied into the other) of two staged tiles (K and V; Q and dO), and for dk-dv two rows of
// lse and delta per buffer.
template <int HeadDim, class Tiling>
inline constexpr std::size_t staged_bytes =
    2 * 2 * static_cast<std::size_t>(Tiling::cols) * pitch<HeadDim> * sizeof(bf16);
template <int HeadDim, class Tiling>
inline constexpr std::size_t forward_shared_bytes =
    staged_bytes<HeadDim, Tiling> +
    (Tiling::shared_q ? static_cast<std::size_t>(Tiling::block_rows) * pitch<HeadDim> * sizeof(bf16)
                      : 0);
template <int HeadDim, class Tiling>
inline constexpr std::size_t dkdv_shared_bytes = staged_bytes<HeadDim, Tiling> +
                                                 2 * 2 * static_cast<std::size_t>(Tiling::cols) *
                                                     sizeof(float);

struct arguments {
  attention_shape shape;  // attention_shape::whole_sequences(layout) for self-attention
  float scale;            // 1 / sqrt(E)
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* out;  // forward's results
  float* lse_out;
  const float* lse;  // backward's inputs
  const bf16* dout;
  const float* delta;
  bf16* dq;
  bf16* dk;
  bf16* dv;
};

namespace detail {

TPX_HOST_DEVICE inline std::int64_t least(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

// 2^x with results below fp32's normal range (2^-126) flushed to zero (PTX's .ftz): on the GPU the
// instruction ex2.approx.ftz (exp2f wraps the same instruction in a test and two multiplies to
// keep subnormal results, four instructions for each score). A probability that small adds
// nothing to a row whose sum is at least 1, nor to a gradient.
TPX_HOST_DEVICE inline float exp2_ftz(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// The backward passes' exponential: exp2_ftz, except at width 128, where the dq and dk-dv kernels
// are at the register limit and ptxas (sm_90) spills with it (48 and 132 bytes) but not with
// exp2f.
template <int HeadDim>
TPX_HOST_DEVICE inline float backward_exp2(float x) {
  if constexpr (HeadDim > 64)
    return exp2f(x);
  else
    return exp2_ftz(x);
}

// A warp's rows of a [*, HeadDim] array as A fragments (R tiles of 16 rows, HeadDim / 16
// k-steps each), and its fp32 accumulators of a product with a staged tile of Cols rows
// (R x Cols / 8 tiles of 8 columns) or with HeadDim columns (R x HeadDim / 8).
template <int HeadDim, int R>
using row_fragments = std::uint32_t[R][HeadDim / 16][4];
template <int R, int Cols>
using tile_accumulators = float[R][Cols / 8][4];
template <int HeadDim, int R>
using row_accumulators = float[R][HeadDim / 8][4];

// Starts copying rows [0, rows) of HeadDim elements, `stride` apart from src, into a
// [Cols, pitch] tile, rows past `rows` zero, in chunks of 8 elements (16 bytes: one cp.async per
// thread and chunk on the device). The copies land by the block's next wait_async.
template <int HeadDim, int Cols, class Block>
TPX_HOST_DEVICE void stage(Block& block, const bf16* src, int stride, std::int64_t rows,
                           bf16* tile) {
  constexpr int chunks = HeadDim / 8;
  for (int c = block.thread(); c < Cols * chunks; c += threads) {
    const int r = c / chunks, col = (c % chunks) * 8;
    const bool real = r < rows;
    block.copy_async_16(tile + r * pitch<HeadDim> + col, real ? src + r * stride + col : src, real);
  }
}

// Two tiles of Cols rows (K and V, or Q and dO) in each of two buffers.
template <int HeadDim, int Cols>
struct tile_pairs {
  bf16* tiles;  // [buffer][which][Cols][pitch]
  TPX_HOST_DEVICE bf16* first(int buffer) const {
    return tiles + 2 * buffer * Cols * pitch<HeadDim>;
  }
  TPX_HOST_DEVICE bf16* second(int buffer) const { return first(buffer) + Cols * pitch<HeadDim>; }
};

// Runs body(buffer, t0) for the tiles t0 = from, from + Cols, ... <= last, each staged by
// stage(buffer, t0) one tile ahead (FlashAttention-2's double buffering): while the block
// computes on one buffer, the next tile's rows are copied into the other. Every thread of the
// block runs it alike.
template <int Cols, class Block, class Stage, class Body>
TPX_HOST_DEVICE void over_staged_tiles(Block& block, std::int64_t from, std::int64_t last,
                                       const Stage& stage_tile, const Body& body) {
  stage_tile(0, from);
  block.commit_async();
  int buffer = 0;
  for (std::int64_t t0 = from; t0 <= last; t0 += Cols, buffer ^= 1) {
    if (t0 + Cols <= last) {  // the other buffer was last read before the previous sync
      stage_tile(buffer ^ 1, t0 + Cols);
      block.commit_async();
      block.wait_async_all_but_latest();
    } else {
      block.wait_async_all();
    }
    block.sync();
    body(buffer, t0);
    block.sync();
  }
}

// Every accumulator of a product with a staged tile made 0.
template <int R, int Cols>
TPX_HOST_DEVICE void set_to_zero(tile_accumulators<R, Cols>& acc) {
  TPX_UNROLL
  for (int n = 0; n < Cols / 8; ++n) {
    TPX_UNROLL
    for (int r = 0; r < R; ++r) {
      TPX_UNROLL
      for (int i = 0; i < 4; ++i) acc[r][n][i] = 0;
    }
  }
}

// acc[r][n] = row tile r of A times the transpose of a staged tile (Cols rows at pitch):
// acc[r][n] covers tile rows 8n .. 8n + 7. Each fragment of the tile is loaded once for all R
// row tiles, two k-steps per ldmatrix.
template <int HeadDim, int R, int Cols, class Block>
TPX_HOST_DEVICE void times_tile_transposed(Block& block, const row_fragments<HeadDim, R>& a,
                                           const bf16* tile, tile_accumulators<R, Cols>& acc) {
  static_assert(HeadDim % 32 == 0, "k-steps are loaded in pairs");
  set_to_zero<R, Cols>(acc);
  TPX_UNROLL
  for (int n = 0; n < Cols / 8; ++n) {
    TPX_UNROLL
    for (int kk = 0; kk < HeadDim / 16; kk += 2) {
      std::uint32_t b[2][2];
      mma::load_b_transposed_x2(block, b, tile + 8 * n * pitch<HeadDim> + 16 * kk, pitch<HeadDim>);
      TPX_UNROLL
      for (int r = 0; r < R; ++r) {
        block.mma(acc[r][n], a[r][kk], b[0]);
        block.mma(acc[r][n], a[r][kk + 1], b[1]);
      }
    }
  }
}

// The same product with A's R x 16 rows in shared memory at pitch, from `rows`: for each pair of
// k-steps, A's fragments are loaded (ldmatrix) for all of the tile's columns, each fragment of the
// tile once, as FlashAttention-2 orders it; each accumulator sums its k-steps in the same order.
template <int HeadDim, int R, int Cols, class Block>
TPX_HOST_DEVICE void shared_times_tile_transposed(Block& block, const bf16* rows, const bf16* tile,
                                                  tile_accumulators<R, Cols>& acc) {
  static_assert(HeadDim % 32 == 0, "k-steps are loaded in pairs");
  set_to_zero<R, Cols>(acc);
  TPX_UNROLL
  for (int kk = 0; kk < HeadDim / 16; kk += 2) {
    std::uint32_t a[R][2][4];
    TPX_UNROLL
    for (int r = 0; r < R; ++r) {
      mma::load_a_x4(block, a[r][0], rows + 16 * r * pitch<HeadDim> + 16 * kk, pitch<HeadDim>);
      mma::load_a_x4(block, a[r][1], rows + 16 * r * pitch<HeadDim> + 16 * (kk + 1),
                     pitch<HeadDim>);
    }
    TPX_UNROLL
    for (int n = 0; n < Cols / 8; ++n) {
      std::uint32_t b[2][2];
      mma::load_b_transposed_x2(block, b, tile + 8 * n * pitch<HeadDim> + 16 * kk, pitch<HeadDim>);
      TPX_UNROLL
      for (int r = 0; r < R; ++r) {
        block.mma(acc[r][n], a[r][0], b[0]);
        block.mma(acc[r][n], a[r][1], b[1]);
      }
    }
  }
}

// out[r][e] += P (row tile r: 16 x Cols, as accumulators p[r], rounded to bf16) times a staged
// tile (Cols rows x HeadDim): out[r][e] covers columns 8e .. 8e + 7, loaded two per ldmatrix.
template <int HeadDim, int R, int Cols, class Block>
TPX_HOST_DEVICE void accumulate_times_tile(Block& block, const tile_accumulators<R, Cols>& p,
                                           const bf16* tile, row_accumulators<HeadDim, R>& out) {
  TPX_UNROLL
  for (int kk = 0; kk < Cols / 16; ++kk) {
    std::uint32_t a[R][4];
    TPX_UNROLL
    for (int r = 0; r < R; ++r) mma::a_from_accumulators(a[r], p[r][2 * kk], p[r][2 * kk + 1]);
    TPX_UNROLL
    for (int e = 0; e < HeadDim / 8; e += 2) {
      std::uint32_t b[2][2];
      mma::load_b_x2(block, b, tile + 16 * kk * pitch<HeadDim> + 8 * e, pitch<HeadDim>);
      TPX_UNROLL
      for (int r = 0; r < R; ++r) {
        block.mma(out[r][e], a[r], b[0]);
        block.mma(out[r][e + 1], a[r], b[1]);
      }
    }
  }
}

// The maximum over the 4 lanes of a group (the lanes holding one row's columns).
template <class Block>
TPX_HOST_DEVICE float group_max(Block& block, float x) {
  x = fmaxf(x, block.shfl_xor(x, 1));
  return fmaxf(x, block.shfl_xor(x, 2));
}
template <class Block>
TPX_HOST_DEVICE float group_sum(Block& block, float x) {
  x += block.shfl_xor(x, 1);
  return x + block.shfl_xor(x, 2);
}

// A tile column bound: `last`, a key offset from the tile's start, clamped to [-1, Cols).
template <int Cols>
TPX_HOST_DEVICE inline int last_column_at_most(std::int64_t last) {
  return static_cast<int>(last < -1 ? -1 : least(last, Cols - 1));
}

// Whether accumulator element i of column tile n (the lane's columns 8n + 2 pair + {0, 1}) is at
// or left of column `last`.
TPX_HOST_DEVICE inline bool seen_within(mma::lane_coordinates at, int n, int i, int last) {
  return 8 * n + mma::accumulator_column(at, i) <= last;
}

// Loads the warp's R x 16 rows (starting at `first`, of a sequence of t_len rows `stride`
// elements apart from m) as A fragments; rows past the sequence are zero.
template <int HeadDim, int R>
TPX_HOST_DEVICE void load_rows(row_fragments<HeadDim, R>& a, const bf16* m, int stride,
                               std::int64_t first, std::int64_t t_len, mma::lane_coordinates at) {
  TPX_UNROLL
  for (int r = 0; r < R; ++r) {
    const std::int64_t rows_first = first + 16 * r;
    const int valid = static_cast<int>(least(16, t_len - rows_first));
    TPX_UNROLL
    for (int kk = 0; kk < HeadDim / 16; ++kk)
      mma::load_a(a[r][kk], m + rows_first * stride + 16 * kk, stride, valid, at);
  }
}

// Writes scale times the warp's accumulators to its rows (from `first`, `stride` elements apart
// from m).
template <int HeadDim, int R>
TPX_HOST_DEVICE void store_rows(const row_accumulators<HeadDim, R>& acc, float scale,
                                std::int64_t first, std::int64_t t_len, mma::lane_coordinates at,
                                bf16* m, int stride) {
  TPX_UNROLL
  for (int r = 0; r < R; ++r) {
    TPX_UNROLL
    for (int e = 0; e < HeadDim / 8; ++e) {
      TPX_UNROLL
      for (int i = 0; i < 4; i += 2) {  // elements i and i + 1: one row, adjacent columns
        const std::int64_t row = first + 16 * r + mma::accumulator_row(at, i);
        if (row < t_len)
          mma::store_pair(m + row * stride + 8 * e + mma::accumulator_column(at, i),
                          bf16(scale * acc[r][e][i]), bf16(scale * acc[r][e][i + 1]));
      }
    }
  }
}

// The warp's query rows as the first operand of S = Q K^T (forward): A fragments loaded once
// and kept in registers, or (Shared) the block's rows staged in shared memory at `staging`
// (forward_shared_bytes' last part), whose fragments each product loads.
template <int HeadDim, int R, bool Shared>
struct query_operand;

template <int HeadDim, int R>
struct query_operand<HeadDim, R, false> {
  row_fragments<HeadDim, R> a;
  template <class Block>
  TPX_HOST_DEVICE query_operand(Block&, const bf16* q, int stride, std::int64_t /*block_first*/,
                                std::int64_t first, std::int64_t t_len, mma::lane_coordinates at,
                                bf16*) {
    load_rows<HeadDim, R>(a, q, stride, first, t_len, at);
  }
  template <int Cols, class Block>
  TPX_HOST_DEVICE void times(Block& block, const bf16* tile, tile_accumulators<R, Cols>& s) const {
    times_tile_transposed<HeadDim, R, Cols>(block, a, tile, s);
  }
};

template <int HeadDim, int R>
struct query_operand<HeadDim, R, true> {
  const bf16* rows;  // the warp's first row in shared memory
  // Starts staging the block's 16 x warps x R rows from block_first (its own async group, which
  // lands by the wait before the first key tile's product).
  template <class Block>
  TPX_HOST_DEVICE query_operand(Block& block, const bf16* q, int stride, std::int64_t block_first,
                                std::int64_t first, std::int64_t t_len, mma::lane_coordinates,
                                bf16* staging)
      : rows(staging + (first - block_first) * pitch<HeadDim>) {
    stage<HeadDim, 16 * warps * R>(block, q + block_first * stride, stride, t_len - block_first,
                                   staging);
    block.commit_async();
  }
  template <int Cols, class Block>
  TPX_HOST_DEVICE void times(Block& block, const bf16* tile, tile_accumulators<R, Cols>& s) const {
    shared_times_tile_transposed<HeadDim, R, Cols>(block, rows, tile, s);
  }
};

// Where a sequence's rows lie in the arrays: row t at element base + t * stride; lse and delta
// hold one element per row of HeadDim elements, so row t's is at (base + t * stride) / HeadDim.
// The stride is 32-bit (a position's heads times HeadDim; checked by the launcher), which keeps
// the address arithmetic of the tile loops in fewer registers.
template <int HeadDim>
struct sequence_rows {
  std::int64_t t_len, base;
  int stride;

  TPX_HOST_DEVICE sequence_rows(const attention_layout& layout, std::int64_t sequence)
      : t_len(layout.t_len),
        base(layout.row_of(sequence, 0) * HeadDim),
        stride(static_cast<int>(layout.row_step() * HeadDim)) {}
  TPX_HOST_DEVICE std::int64_t stat(std::int64_t t) const { return (base + t * stride) / HeadDim; }
};

// What the lanes of a query block (forward, dq) work from: the key and value tiles of Cols rows
// in shared memory, the lane's fragment coordinates, where the sequence's query rows and key rows
// lie, the warp's first row (of its R row tiles) and the block's last row, and the position of
// the queries' first row (the block of queries' `first`; the key tiles are those up to the
// block's last row's position).
template <int HeadDim, int R, int Cols>
struct query_block {
  tile_pairs<HeadDim, Cols> keys;  // K, then V
  mma::lane_coordinates at;
  sequence_rows<HeadDim> rows, key_rows;
  std::int64_t first, last, position;

  template <class Block>
  TPX_HOST_DEVICE query_block(Block& block, const arguments& args, std::int64_t block_index,
                              std::int64_t sequence)
      : keys{reinterpret_cast<bf16*>(block.shared())},
        at(block.lane()),
        rows(args.shape.queries, sequence),
        key_rows(args.shape.keys, args.shape.key_sequence(sequence)),
        first(block_index * 16 * warps * R + 16 * R * block.warp()),
        last(least((block_index + 1) * 16 * warps * R, rows.t_len) - 1),
        position(args.shape.first) {}

  // The last key that row `row` (of the block's) sees, within the keys.
  TPX_HOST_DEVICE std::int64_t last_key(std::int64_t row) const {
    return least(position + row, key_rows.t_len - 1);
  }

  // Runs body(k_tile, v_tile, s0) over the key tiles the block sees.
  template <class Block, class Body>
  TPX_HOST_DEVICE void over_key_tiles(Block& block, const arguments& args, const Body& body) const {
    over_staged_tiles<Cols>(
        block, 0, last_key(last),
        [&](int buffer, std::int64_t s0) {
          const std::int64_t at_s0 = key_rows.base + s0 * key_rows.stride;
          stage<HeadDim, Cols>(block, args.k + at_s0, key_rows.stride, key_rows.t_len - s0,
                               keys.first(buffer));
          stage<HeadDim, Cols>(block, args.v + at_s0, key_rows.stride, key_rows.t_len - s0,
                               keys.second(buffer));
        },
        [&](int buffer, std::int64_t s0) { body(keys.first(buffer), keys.second(buffer), s0); });
  }

  // The last column of the key tile at s0 that the lane's row h (of rows group and group + 8)
  // of row tile r sees (key <= the row's position, and key inside the sequence), -1 if none:
  // one comparison per score then masks the tile (seen_within).
  TPX_HOST_DEVICE int last_seen_column(std::int64_t s0, int r, int h) const {
    return last_column_at_most<Cols>(last_key(first + 16 * r + at.group + 8 * h) - s0);
  }
  // Whether the tile at s0 lies right of the warp's last row's position: none of its keys is
  // seen, and the warp (all its lanes alike, so the branch does not diverge) skips it.
  TPX_HOST_DEVICE bool sees_none(std::int64_t s0) const {
    return s0 > position + first + 16 * R - 1;
  }
  // Whether every row of the warp sees every key of the tile at s0: the tile ends at or left of
  // the warp's first row's position, inside the keys. Most tiles are such; the warp then skips
  // the masking (a comparison and a select per score, and their predicate bookkeeping).
  TPX_HOST_DEVICE bool sees_all(std::int64_t s0) const {
    return s0 + Cols - 1 <= position + first && s0 + Cols <= key_rows.t_len;
  }
};

}  // namespace detail

// Forward of query block `block_index` (of Tiling::block_rows) of sequence `sequence`: out and
// lse of its rows.
template <int HeadDim, class Tiling = forward_tiling<HeadDim>, class Block>
TPX_HOST_DEVICE void forward_block(Block& block, const arguments& args, std::int64_t block_index,
                                   std::int64_t sequence) {
  static_assert(HeadDim % 32 == 0,
                "the head width must be a multiple of 32 (k-steps of 16, loaded in pairs)");
  constexpr int R = Tiling::row_tiles, Cols = Tiling::cols;
  const detail::query_block<HeadDim, R, Cols> self(block, args, block_index, sequence);
  const auto& at = self.at;
  const auto& rows = self.rows;
  const std::int64_t first = self.first;
  const auto& [t_len, base, stride] = rows;
  const detail::query_operand<HeadDim, R, Tiling::shared_q> q(
      block, args.q + base, stride, block_index * Tiling::block_rows, first, t_len, at,
      reinterpret_cast<bf16*>(block.shared() + staged_bytes<HeadDim, Tiling>));
  const float score_scale = args.scale * log2e;
  float m[R][2], l[R][2];  // per row tile, of rows group and group + 8
  detail::row_accumulators<HeadDim, R> o = {};
  TPX_UNROLL
  for (int r = 0; r < R; ++r) m[r][0] = m[r][1] = -INFINITY, l[r][0] = l[r][1] = 0;
  self.over_key_tiles(block, args, [&](const bf16* k_tile, const bf16* v_tile, std::int64_t s0) {
    if (self.sees_none(s0)) return;  // changes no row of the warp
    detail::tile_accumulators<R, Cols> s;
    q.template times<Cols>(block, k_tile, s);
    // The online softmax of the tile's raw scores s (the max is taken before scaling, which
    // keeps the order: scale > 0), p = exp2(s scale - m) in one fma each.
    const auto softmax_tile = [&]<bool Masked>() {
      TPX_UNROLL
      for (int r = 0; r < R; ++r) {
        int last_seen[2] = {};
        if constexpr (Masked) {
          last_seen[0] = self.last_seen_column(s0, r, 0);
          last_seen[1] = self.last_seen_column(s0, r, 1);
        }
        float tile_max[2] = {-INFINITY, -INFINITY};
        TPX_UNROLL
        for (int n = 0; n < Cols / 8; ++n) {
          TPX_UNROLL
          for (int i = 0; i < 4; ++i) {
            if constexpr (Masked)
              if (!detail::seen_within(at, n, i, last_seen[i >> 1])) s[r][n][i] = -INFINITY;
            tile_max[i >> 1] = fmaxf(tile_max[i >> 1], s[r][n][i]);
          }
        }
        TPX_UNROLL
        for (int h = 0; h < 2; ++h) {
          const float m_new = fmaxf(m[r][h], score_scale * detail::group_max(block, tile_max[h]));
          // Only under a mask can a row have seen no key yet (m = -inf): then no rescale, p = 0.
          // Unmasked, m_new is finite and a first tile's rescale is exp2(-inf) = 0 of zeros.
          const bool none_seen = Masked && m_new == -INFINITY;
          const float rescale = none_seen ? 1.0f : detail::exp2_ftz(m[r][h] - m_new);
          m[r][h] = m_new;
          l[r][h] *= rescale;
          TPX_UNROLL
          for (int e = 0; e < HeadDim / 8; ++e) {
            o[r][e][2 * h] *= rescale;
            o[r][e][2 * h + 1] *= rescale;
          }
          TPX_UNROLL
          for (int n = 0; n < Cols / 8; ++n) {
            TPX_UNROLL
            for (int j = 2 * h; j < 2 * h + 2; ++j) {
              const float p = detail::exp2_ftz(fmaf(s[r][n][j], score_scale, -m_new));
              s[r][n][j] = none_seen ? 0.0f : p;
              l[r][h] += s[r][n][j];
            }
          }
        }
      }
    };
    if (self.sees_all(s0))
      softmax_tile.template operator()<false>();
    else
      softmax_tile.template operator()<true>();
    detail::accumulate_times_tile<HeadDim, R, Cols>(block, s, v_tile, o);
  });
  TPX_UNROLL
  for (int r = 0; r < R; ++r) {
    TPX_UNROLL
    for (int h = 0; h < 2; ++h) {
      const float sum = detail::group_sum(block, l[r][h]);
      const std::int64_t row = first + 16 * r + at.group + 8 * h;
      if (row >= t_len) continue;
      const float inverse = 1.0f / sum;  // one division per row, not one per element
      TPX_UNROLL
      for (int e = 0; e < HeadDim / 8; ++e)
        mma::store_pair(args.out + base + row * stride + 8 * e + 2 * at.pair,
                        bf16(o[r][e][2 * h] * inverse), bf16(o[r][e][2 * h + 1] * inverse));
      if (at.pair == 0) args.lse_out[rows.stat(row)] = (m[r][h] + log2f(sum)) * ln2;
    }
  }
}

// dq of query block `block_index` (of Tiling::block_rows) of sequence `sequence`.
template <int HeadDim, class Tiling = backward_tiling, class Block>
TPX_HOST_DEVICE void dq_block(Block& block, const arguments& args, std::int64_t block_index,
                              std::int64_t sequence) {
  static_assert(Tiling::row_tiles == 1, "the backward passes take one row tile per warp");
  constexpr int Cols = Tiling::cols;
  const detail::query_block<HeadDim, 1, Cols> self(block, args, block_index, sequence);
  const auto& at = self.at;
  const auto& rows = self.rows;
  const std::int64_t first = self.first;
  const auto& [t_len, base, stride] = rows;
  detail::row_fragments<HeadDim, 1> q, dout;
  detail::load_rows<HeadDim, 1>(q, args.q + base, stride, first, t_len, at);
  detail::load_rows<HeadDim, 1>(dout, args.dout + base, stride, first, t_len, at);
  float lse[2], delta[2];  // of rows group and group + 8, lse in base 2
  TPX_UNROLL
  for (int h = 0; h < 2; ++h) {
    const std::int64_t row = first + at.group + 8 * h;
    lse[h] = row < t_len ? args.lse[rows.stat(row)] * log2e : 0.0f;
    delta[h] = row < t_len ? args.delta[rows.stat(row)] : 0.0f;
  }
  const float score_scale = args.scale * log2e;
  detail::row_accumulators<HeadDim, 1> dq = {};
  self.over_key_tiles(block, args, [&](const bf16* k_tile, const bf16* v_tile, std::int64_t s0) {
    detail::tile_accumulators<1, Cols> ds, dp;
    detail::times_tile_transposed<HeadDim, 1, Cols>(block, q, k_tile, ds);
    detail::times_tile_transposed<HeadDim, 1, Cols>(block, dout, v_tile, dp);
    const int last_seen[2] = {self.last_seen_column(s0, 0, 0), self.last_seen_column(s0, 0, 1)};
    TPX_UNROLL
    for (int n = 0; n < Cols / 8; ++n) {
      TPX_UNROLL
      for (int i = 0; i < 4; ++i) {
        const float score = fmaf(ds[0][n][i], score_scale, -lse[i >> 1]);
        const float p = detail::seen_within(at, n, i, last_seen[i >> 1])
                            ? detail::backward_exp2<HeadDim>(score)
                            : 0.0f;
        ds[0][n][i] = p * (dp[0][n][i] - delta[i >> 1]);
      }
    }
    detail::accumulate_times_tile<HeadDim, 1, Cols>(block, ds, k_tile, dq);
  });
  detail::store_rows<HeadDim, 1>(dq, args.scale, first, t_len, at, args.dq + base, stride);
}

namespace detail {

// The one-pass backward's dq shares (one_pass_block): split `split` of `splits` adds, for each key
// block it takes, dS K into its own fp32 [T, HeadDim] rows of the sequence, from `rows`; `first`:
// the split's first key block, which stores rather than adds (it is the first to reach every
// query tile the split reaches).
struct dq_share {
  float* rows;
  bool first;
};

// Shared memory of the one-pass program beyond dk-dv's: the tile of dS^T (64 keys x Cols queries,
// bf16, at pitch Cols + 8) and the block's keys (64 x HeadDim at pitch), for dQ += dS K.
template <int Cols>
inline constexpr int ds_pitch = Cols + pitch_padding;

// dk and dv of key block `block_index` of key sequence `sequence`, over the query sequences of
// its group in turn (grouped-query attention; one without), and with WithDq its share of dq
// (dS K over the block's keys) into `share`, in 5 products per query tile where the dq pass and
// dk-dv make 7 (WithDq: whole sequences, no group).
template <int HeadDim, class Tiling, bool WithDq, bool Grouped, class Block>
TPX_HOST_DEVICE void key_block_gradients(Block& block, const arguments& args,
                                         std::int64_t block_index, std::int64_t sequence,
                                         dq_share share) {
  static_assert(Tiling::row_tiles == 1, "the backward passes take one row tile per warp");
  constexpr int Cols = Tiling::cols;
  static_assert(!WithDq || Cols == Tiling::block_rows,
                "the one-pass backward takes query tiles of the key block's 64 rows");
  const tile_pairs<HeadDim, Cols> queries{reinterpret_cast<bf16*>(block.shared())};  // Q, dO
  // [buffer][lse (base 2), delta][Cols], after the tiles
  float* row_stats = reinterpret_cast<float*>(block.shared() + staged_bytes<HeadDim, Tiling>);
  // With WithDq: dS^T, then the block's keys, after the row statistics.
  bf16* ds_tile = reinterpret_cast<bf16*>(row_stats + 2 * 2 * Cols);
  bf16* key_tile = ds_tile + Tiling::block_rows * ds_pitch<Cols>;
  const mma::lane_coordinates at(block.lane());
  // The key rows (k, v, dk, dv) and the query rows (q, dO, lse, delta, dq) of the first query
  // sequence that reads them (the only one without groups, at the keys' stride then: the same
  // heads per position on both sides).
  const sequence_rows<HeadDim> key_rows(args.shape.keys, sequence);
  const sequence_rows<HeadDim> first_rows(args.shape.queries,
                                          Grouped ? sequence * args.shape.group : sequence);
  const int key_stride = Grouped ? key_rows.stride : first_rows.stride;
  const std::int64_t block_first = block_index * Tiling::block_rows;
  const std::int64_t first = block_first + 16 * block.warp();  // its keys
  if constexpr (WithDq) {  // its own async group, landed by the first tile's wait
    stage<HeadDim, Tiling::block_rows>(block, args.k + key_rows.base + block_first * key_stride,
                                       key_stride, key_rows.t_len - block_first, key_tile);
    block.commit_async();
  }
  row_fragments<HeadDim, 1> k, v;
  load_rows<HeadDim, 1>(k, args.k + key_rows.base, key_stride, first, key_rows.t_len, at);
  load_rows<HeadDim, 1>(v, args.v + key_rows.base, key_stride, first, key_rows.t_len, at);
  const float score_scale = args.scale * log2e;
  row_accumulators<HeadDim, 1> dk = {}, dv = {};
  // A loop of one trip without groups, which the compiler removes: multi-head attention keeps the
  // registers it had before grouped queries (a loop of args.shape.group trips, and a stride of the
  // keys' own, spilled at head width 64).
  const std::int64_t members = Grouped ? args.shape.group : 1;
  for (std::int64_t member = 0; member < members; ++member) {
    const sequence_rows<HeadDim> rows =
        Grouped ? sequence_rows<HeadDim>(args.shape.queries, sequence * members + member)
                : first_rows;
    const std::int64_t t_len = rows.t_len, base = rows.base;
    const int stride = rows.stride;
    const auto stage_queries = [&](int buffer, std::int64_t t0) {
      stage<HeadDim, Cols>(block, args.q + base + t0 * stride, stride, t_len - t0,
                           queries.first(buffer));
      stage<HeadDim, Cols>(block, args.dout + base + t0 * stride, stride, t_len - t0,
                           queries.second(buffer));
      for (int j = block.thread(); j < Cols; j += threads) {
        const bool real = t0 + j < t_len;
        row_stats[(2 * buffer) * Cols + j] = real ? args.lse[rows.stat(t0 + j)] * log2e : 0.0f;
        row_stats[(2 * buffer + 1) * Cols + j] = real ? args.delta[rows.stat(t0 + j)] : 0.0f;
      }
    };
    // The query tiles that see the block's keys (first + t >= s), none when the block's first key
    // is after the last query's position (dk and dv stay 0).
    const std::int64_t from = args.shape.first_seeing(block_first);
    if (from < t_len)
      over_staged_tiles<Cols>(
          block, from, t_len - 1, stage_queries, [&](int buffer, std::int64_t t0) {
            const bf16* q_tile = queries.first(buffer);
            const bf16* dout_tile = queries.second(buffer);
            const float* lse_tile = row_stats + 2 * buffer * Cols;
            const float* delta_tile = lse_tile + Cols;
            tile_accumulators<1, Cols> p, dp;
            times_tile_transposed<HeadDim, 1, Cols>(block, k, q_tile, p);  // S^T: keys x queries
            // P^T = exp2(S^T scale - lse) where the query sees the key (key <= query < T), else 0,
            // in 32-bit offsets from the tile's first query.
            const int queries_left = static_cast<int>(least(t_len - t0, Cols));
            TPX_UNROLL
            for (int i = 0; i < 4; i += 2) {
              // The key's offset from the tile's first query's position: below Cols (the tiles
              // start where the block's first key is first seen), and below 0 (seen by every query)
              // once the tiles pass the warp's keys, where -1 says as much in 32 bits.
              const std::int64_t offset =
                  first + mma::accumulator_row(at, i) - args.shape.first - t0;
              const int key = static_cast<int>(offset < -1 ? -1 : offset);
              TPX_UNROLL
              for (int n = 0; n < Cols / 8; ++n) {
                TPX_UNROLL
                for (int j = i; j < i + 2; ++j) {
                  const int column = 8 * n + mma::accumulator_column(at, j);
                  const float e =
                      backward_exp2<HeadDim>(fmaf(p[0][n][j], score_scale, -lse_tile[column]));
                  p[0][n][j] = key <= column && column < queries_left ? e : 0.0f;
                }
              }
            }
            accumulate_times_tile<HeadDim, 1, Cols>(block, p, dout_tile, dv);
            times_tile_transposed<HeadDim, 1, Cols>(block, v, dout_tile, dp);  // dP^T
            TPX_UNROLL
            for (int n = 0; n < Cols / 8; ++n) {
              TPX_UNROLL
              for (int i = 0; i < 4; ++i)
                p[0][n][i] *= dp[0][n][i] - delta_tile[8 * n + mma::accumulator_column(at, i)];
            }
            accumulate_times_tile<HeadDim, 1, Cols>(block, p, q_tile, dk);
            if constexpr (WithDq) {
              // dS^T (bf16, as it enters every second product) of the warp's 16 keys into the tile;
              // then each warp takes 16 of the tile's queries: dQ = dS K over the block's 64 keys,
              // A = dS read transposed from dS^T, B = the keys as stored.
              TPX_UNROLL
              for (int n = 0; n < Cols / 8; ++n) {
                TPX_UNROLL
                for (int i = 0; i < 4; i += 2)
                  mma::store_pair(
                      ds_tile + (16 * block.warp() + mma::accumulator_row(at, i)) * ds_pitch<Cols> +
                          8 * n + mma::accumulator_column(at, i),
                      bf16(p[0][n][i]), bf16(p[0][n][i + 1]));
              }
              block.sync();
              row_accumulators<HeadDim, 1> dq = {};
              TPX_UNROLL
              for (int kk = 0; kk < Tiling::block_rows / 16; ++kk) {
                std::uint32_t a[4];
                mma::load_a_transposed_x4(block, a,
                                          ds_tile + 16 * kk * ds_pitch<Cols> + 16 * block.warp(),
                                          ds_pitch<Cols>);
                TPX_UNROLL
                for (int e = 0; e < HeadDim / 8; e += 2) {
                  std::uint32_t b[2][2];
                  mma::load_b_x2(block, b, key_tile + 16 * kk * pitch<HeadDim> + 8 * e,
                                 pitch<HeadDim>);
                  block.mma(dq[0][e], a, b[0]);
                  block.mma(dq[0][e + 1], a, b[1]);
                }
              }
              // Each element of the share is written by one lane, the same for every key block of
              // the split, in key-block order: the sums repeat to the bit.
              TPX_UNROLL
              for (int e = 0; e < HeadDim / 8; ++e) {
                TPX_UNROLL
                for (int i = 0; i < 4; ++i) {
                  const std::int64_t row = t0 + 16 * block.warp() + mma::accumulator_row(at, i);
                  if (row < t_len) {
                    float& x = share.rows[row * HeadDim + 8 * e + mma::accumulator_column(at, i)];
                    x = share.first ? dq[0][e][i] : x + dq[0][e][i];
                  }
                }
              }
            }
          });
  }
  store_rows<HeadDim, 1>(dk, args.scale, first, key_rows.t_len, at, args.dk + key_rows.base,
                         key_stride);
  store_rows<HeadDim, 1>(dv, 1.0f, first, key_rows.t_len, at, args.dv + key_rows.base, key_stride);
}

}  // namespace detail

// dk and dv of key block `block_index` (of Tiling::block_rows) of key sequence `sequence`; with
// Grouped, over the args.shape.group query sequences that read it (grouped-query attention),
// else over the one query sequence of the same index (args.shape.group = 1).
template <int HeadDim, class Tiling = backward_tiling, bool Grouped = false, class Block>
TPX_HOST_DEVICE void dkdv_block(Block& block, const arguments& args, std::int64_t block_index,
                                std::int64_t sequence) {
  detail::key_block_gradients<HeadDim, Tiling, false, Grouped>(block, args, block_index, sequence,
                                                               {});
}

// The one-pass backward (FlashAttention-2's 5 products per tile, where dq_block and dkdv_block
// make 7), deterministic without atomics: split `split` of `splits` takes the key blocks split,
// split + splits, ... of sequence `sequence` in turn, writes their dk and dv, and sums their
// dS K into its own share of dq, dq_shares[split][sequence] ([T, HeadDim] fp32 of `sequences`);
// sum_dq_shares_block then adds the shares in split order. Whole sequences only
// (args.shape = attention_shape::whole_sequences(layout)). Shared memory: one_pass_shared_bytes.
template <int HeadDim, class Tiling = backward_tiling>
inline constexpr std::size_t one_pass_shared_bytes = dkdv_shared_bytes<HeadDim, Tiling> +
                                                     static_cast<std::size_t>(Tiling::block_rows) *
                                                         (detail::ds_pitch<Tiling::cols> +
                                                          pitch<HeadDim>)*sizeof(bf16);

template <int HeadDim, class Tiling = backward_tiling, class Block>
TPX_HOST_DEVICE void one_pass_block(Block& block, const arguments& args, float* dq_shares,
                                    std::int64_t splits, std::int64_t split, std::int64_t sequence,
                                    std::int64_t sequences) {
  const std::int64_t t_len = args.shape.queries.t_len;
  float* share = dq_shares + (split * sequences + sequence) * t_len * HeadDim;
  for (std::int64_t b = split; b * Tiling::block_rows < t_len; b += splits)
    detail::key_block_gradients<HeadDim, Tiling, true, false>(block, args, b, sequence,
                                                              {share, b == split});
}

// dq of rows [64 block_index, + 64) of sequence `sequence`: scale times the sum of the shares
// that reached them (split s reaches the query tiles from its first key block s on), in split
// order.
template <int HeadDim, class Tiling = backward_tiling, class Block>
TPX_HOST_DEVICE void sum_dq_shares_block(Block& block, const arguments& args,
                                         const float* dq_shares, std::int64_t splits,
                                         std::int64_t block_index, std::int64_t sequence,
                                         std::int64_t sequences) {
  const detail::sequence_rows<HeadDim> rows(args.shape.queries, sequence);
  const std::int64_t first = block_index * Tiling::block_rows;
  const std::int64_t reached = detail::least(splits, block_index + 1);
  const std::int64_t share = rows.t_len * HeadDim;
  for (int c = 2 * block.thread(); c < Tiling::block_rows * HeadDim; c += 2 * threads) {
    const std::int64_t row = first + c / HeadDim;
    if (row >= rows.t_len) break;
    const std::int64_t at = row * HeadDim + c % HeadDim;
    float sum[2] = {0.0f, 0.0f};
    for (std::int64_t s = 0; s < reached; ++s) {
      const float* x = dq_shares + (s * sequences + sequence) * share + at;
      sum[0] += x[0];
      sum[1] += x[1];
    }
    mma::store_pair(args.dq + rows.base + row * rows.stride + c % HeadDim,
                    bf16(args.scale * sum[0]), bf16(args.scale * sum[1]));
  }
}

}  // namespace tpx::kernels::flash

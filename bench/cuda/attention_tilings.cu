// tpx-bench-cuda attention-tilings: the tensor-core attention kernels (cuda/kernels/
// flash_attention.hpp) under other tilings than their own, timed and checked against the host
// twin as `attention` times the kernels the layers call (attention_timing.hpp), so that one run
// on a GPU says which tiling to make the kernels' own. A tiling (kernels::flash::tiling) sets a
// pass's row tiles of 16 per warp (R), the rows of each staged tile of the other side (Cols) and
// the blocks that must fit on a multiprocessor (MinBlocks, which caps the registers), and for the
// forward whether its queries are staged in shared memory (SharedQ) or held in registers; a row
// names the forward's, dq's and dk-dv's as R x Cols[s][/MinBlocks] ("s": shared queries), each
// row changing one pass from the kernels' own tilings (the first row), so that the best of each
// pass can be combined.
//
// The candidates are the ones ptxas (CUDA 13.0, sm_90) compiles without spilling, or spilling a
// few bytes, with their registers per thread (blocks of 4 warps per multiprocessor by registers):
//   head width 64   forward  2x64 255 (2, the kernels'), 1x64 138 (3), 1x64/3 164 (3),
//                            1x128 189 (2), 2x32 194 (2), 2x32/3 168 with 24 bytes spilled (3),
//                            2x64s 250 (2), 1x128s 199 (2)
//                   dq       1x64 138 (3, the kernels'), 1x32 132 (3), 1x128 183 (2)
//                   dk-dv    1x64 255 (2, the kernels'), 1x32 174 (2), 1x32/3 168 with 16 (3)
//   head width 128  forward  1x64 178 (2, the kernels'), 1x32 166 (3), 1x32/3 168 with 8 (3),
//                            1x128s 243 (2)
//                   dq       1x64 254 (2, the kernels'), 1x32 232 (2)
//                   dk-dv    1x64 255 with 48 (2, the kernels'), 1x32 255 with 32 (2)
//   head width 64   one pass 1x64 255 with 12 (2): FlashAttention-2's backward in one program
//                   (5 products per tile, where dq and dk-dv make 7), deterministic: each split
//                   of a sequence's key blocks sums its own share of dq, the shares added in
//                   split order after; with one_pass_splits' splits (2 at 192 sequences), 1 and 4
// (Left out for spilling: at width 64 the forward's 2x128 (400 bytes) and 2x128s (152), dk-dv's
// 1x128 (52); at 128 the forward's 1x128 (84) and 2x64s (40), the one pass (604).)
// The host tests run every R x Cols here on an emulated block
// (tests/unit/flash_attention_test.cpp).
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "attention_timing.hpp"
#include "measure.hpp"
#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/kernels/flash_attention.hpp"
#include "tpx/kernels/flash_attention.hpp"

namespace tpx::bench::cuda {

namespace {

namespace flash = kernels::flash;
using flash::tiling;

// The forward's, dq's and dk-dv's tilings of one row.
template <class Forward, class Dq, class Dkdv>
struct tilings {};

// A row whose backward is the one-pass program (cuda::flash_attention_backward_one_pass) with
// Splits splits of each sequence's key blocks (0: cuda::one_pass_splits' choice), after the
// kernels' own forward.
template <class Tiling, int Splits>
struct one_pass {};

template <class Tiling>
std::string name_of() {
  std::string name = std::to_string(Tiling::row_tiles) + "x" + std::to_string(Tiling::cols);
  if (Tiling::shared_q) name += "s";
  if (Tiling::min_blocks > 0) name += "/" + std::to_string(Tiling::min_blocks);
  return name;
}

template <int E>
using own = tilings<flash::forward_tiling<E>, flash::backward_tiling, flash::backward_tiling>;
template <int E, class Forward>
using forward_only = tilings<Forward, flash::backward_tiling, flash::backward_tiling>;
template <class Dq>
using dq_only = tilings<flash::forward_tiling<64>, Dq, flash::backward_tiling>;

// The rows at each width, the kernels' own first (the list in the paragraph above).
using width_64 =
    std::tuple<own<64>, forward_only<64, tiling<1, 64>>, forward_only<64, tiling<1, 64, 3>>,
               forward_only<64, tiling<1, 128>>, forward_only<64, tiling<2, 32>>,
               forward_only<64, tiling<2, 32, 3>>, forward_only<64, tiling<2, 64, 0, true>>,
               forward_only<64, tiling<1, 128, 0, true>>, dq_only<tiling<1, 32>>,
               dq_only<tiling<1, 128>>,
               tilings<flash::forward_tiling<64>, flash::backward_tiling, tiling<1, 32>>,
               tilings<flash::forward_tiling<64>, flash::backward_tiling, tiling<1, 32, 3>>,
               one_pass<flash::backward_tiling, 0>, one_pass<flash::backward_tiling, 1>,
               one_pass<flash::backward_tiling, 4>>;
using width_128 =
    std::tuple<own<128>, forward_only<128, tiling<1, 32>>, forward_only<128, tiling<1, 32, 3>>,
               forward_only<128, tiling<1, 128, 0, true>>,
               tilings<flash::forward_tiling<128>, tiling<1, 32>, flash::backward_tiling>,
               tilings<flash::forward_tiling<128>, flash::backward_tiling, tiling<1, 32>>>;

// The forward of a row, with tiling Forward.
template <int E, class Forward>
auto forward_call() {
  return [](cudaStream_t s, std::int64_t sequences, const kernels::attention_shape& shape,
            float scale, const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse) {
    tpx::cuda::flash_attention_forward_tiled<E, Forward>(s, sequences, shape, scale, q, k, v, out,
                                                         lse);
  };
}

template <int E, class Forward, class Dq, class Dkdv>
attention_row time_tilings(tilings<Forward, Dq, Dkdv>, std::int64_t batch, std::int64_t heads,
                           std::int64_t t_len, bool tokens, int iters, int warmup,
                           host_twins<bf16>& twins) {
  const std::string name =
      "fwd " + name_of<Forward>() + ", dq " + name_of<Dq>() + ", dkdv " + name_of<Dkdv>();
  return time_attention<bf16>(
      "bf16", name, batch, heads, heads, t_len, context_block{}, E, tokens, iters, warmup,
      forward_call<E, Forward>(),
      [](cudaStream_t s, std::int64_t sequences, const kernels::attention_shape& shape, float scale,
         const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const float* lse,
         const float* delta, bf16* dq, bf16* dk, bf16* dv) {
        tpx::cuda::flash_attention_backward_tiled<E, Dq, Dkdv>(s, sequences, shape, scale, q, k, v,
                                                               dout, lse, delta, dq, dk, dv);
      },
      twins);
}

template <int E, class Tiling, int Splits>
attention_row time_tilings(one_pass<Tiling, Splits>, std::int64_t batch, std::int64_t heads,
                           std::int64_t t_len, bool tokens, int iters, int warmup,
                           host_twins<bf16>& twins) {
  const std::int64_t splits =
      Splits > 0 ? Splits : tpx::cuda::one_pass_splits(batch * heads, t_len);
  const std::string name = "fwd " + name_of<flash::forward_tiling<E>>() + ", one pass " +
                           name_of<Tiling>() + " (" + std::to_string(splits) + " splits" +
                           (Splits > 0 ? ")" : ", the default)");
  int device = 0;
  cudaMemPool_t pool = nullptr;
  TPX_CUDA_CHECK(cudaGetDevice(&device));
  TPX_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));  // the rank's (rank_resources.hpp)
  return time_attention<bf16>(
      "bf16", name, batch, heads, heads, t_len, context_block{}, E, tokens, iters, warmup,
      forward_call<E, flash::forward_tiling<E>>(),
      [pool, splits](cudaStream_t s, std::int64_t sequences, const kernels::attention_shape& shape,
                     float scale, const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
                     const float* lse, const float* delta, bf16* dq, bf16* dk, bf16* dv) {
        // Whole sequences (the tilings' rows have no blocks of queries): one layout.
        tpx::cuda::flash_attention_backward_one_pass<E, Tiling>(s, pool, sequences, shape.queries,
                                                                scale, q, k, v, dout, lse, delta,
                                                                dq, dk, dv, splits);
      },
      twins);
}

template <int E, class Rows>
void time_rows(std::vector<attention_row>& rows, std::int64_t batch, std::int64_t heads,
               const std::vector<std::int64_t>& lengths, bool tokens, int iters, int warmup) {
  host_twins<bf16> twins;  // one per length: every row of a length has the same inputs
  for (std::int64_t t_len : lengths)
    std::apply(
        [&](auto... row) {
          (rows.push_back(time_tilings<E>(row, batch, heads, t_len, tokens, iters, warmup, twins)),
           ...);
        },
        Rows{});
}

}  // namespace

std::vector<attention_row> measure_attention_tilings(std::int64_t batch, std::int64_t heads,
                                                     const std::vector<std::int64_t>& lengths,
                                                     int e, bool tokens, int iters, int warmup) {
  if (e != 64 && e != 128)
    throw std::invalid_argument("attention-tilings: head width -E " + std::to_string(e) +
                                "; the tilings are listed for 64 and 128");
  if (!tpx::cuda::detail::device_has_bf16_mma())
    throw std::invalid_argument(
        "attention-tilings: the tensor-core kernels need a GPU of compute capability 8.0 or newer");
  if (batch * heads > 65535)
    throw std::invalid_argument("attention-tilings: " + std::to_string(batch * heads) +
                                " sequences (-B x -H); the kernels' grid takes at most 65535");
  std::vector<attention_row> rows;
  if (e == 64)
    time_rows<64, width_64>(rows, batch, heads, lengths, tokens, iters, warmup);
  else
    time_rows<128, width_128>(rows, batch, heads, lengths, tokens, iters, warmup);
  return rows;
}

}  // namespace tpx::bench::cuda

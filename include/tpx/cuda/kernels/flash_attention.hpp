// Fused causal attention on tensor cores: the kernels that run kernels/flash_attention.hpp's
// block programs (FlashAttention-2's tiling, mma.sync.m16n8k16 in bf16 with fp32 sums) on the
// GPU, one block of 4 warps per 64 or 128 rows of one sequence:
//   forward            a block per 128 queries (64 at head width 128): out, lse
//   backward  dq       a block per 64 queries, over the key tiles they see
//             dk, dv   a block per 64 keys, over the query tiles that see them
//   or in one pass     a block per split of a sequence's key blocks (dk, dv and its share of
//                      dq), then a block per 64 queries adding the shares: a candidate the
//                      attention-tilings bench times (flash_attention_backward_one_pass)
// Blocks are launched heaviest first (the last rows of a sequence see the most tiles), so the
// causal triangle's long blocks do not start last. The programs are the ones the host tests run
// on an emulated block (tests/unit/flash_attention_test.cpp); on a GPU the kernels are compared
// with naive attention (tests/cuda/kernels_test.cu) and the host twin (nn_layers_test.cu).
//
// cuda::fused_attention_forward / _backward (fused_attention.hpp) send bf16 here when
// flash_attention_applies: head width 32, 64 or 128, every array 16-byte aligned (the tiles are
// staged with 16-byte loads), and a device of compute capability 8.0 or newer, and
// flash_attention_addresses: fewer than 2^24 elements per position (heads x width) on either
// side; everything else takes the CUDA-core kernels. Whole sequences and blocks of queries alike
// (context parallelism's, kernels::attention_shape): a block's forward and dq passes walk the key
// tiles up to its last query's position, and its dk-dv pass has a block per 64 keys of the whole
// sequence. Grouped-query attention (shape.group query sequences per key sequence): the forward
// and dq blocks of a query sequence read its group's keys, and a dk-dv block, one per 64 keys of
// a key sequence, walks the query tiles of each sequence of its group in turn.
//
// Tiles are double-buffered: cp.async copies the next tile of K and V (Q and dO) from global
// memory while the block computes on the current one. K, Q and dO are read as B operands by
// ldmatrix.x4 and V by ldmatrix.x4.trans, two fragments per instruction, from tiles whose rows
// are padded so those reads hit distinct banks.
// Registers (ptxas -v, sm_90, 2026-12-07): forward 169 / 255 / 176 at widths 32 / 64 / 128 (two
// row tiles per warp at 32 and 64: each fragment loaded from shared memory feeds two mma, and
// the registers leave room for two blocks per SM), dq 107 / 139 / 255, dk-dv 138 / 255 / 255;
// at width 128 dq spills 12 bytes and dk-dv 44 (its K and V fragments and two accumulators of E
// floats per lane; 0 and 8 bytes before the kernels took blocks of queries, whose key rows'
// base and length stay live beside the query rows'). The grouped dk-dv kernel (141 / 255 / 255)
// spills 28 bytes at width 64 and 132 at 128: its loop over the group's query sequences and the
// keys' own stride stay live, which is why multi-head attention runs the other instantiation. Where they fall (nvdisasm of the sm_90
// cubin, 2026-12-05): per query tile dk-dv stores 4 words and loads 4 beside its 256 mma, dq
// loads 1 beside 192; the rest is before and after the loop, so the spills cost next to nothing.
// Reading [B, T, H, E] in place (a run-time row stride) cost the forward at width 32 its third
// block per SM (167 registers before); the other widths keep theirs.
// Run on an H200 (2026-11-27): correct (cuda_kernels_test, racecheck clean), at 75-112 TFLOP/s
// for bf16 heads of 64, 0.38-0.52x PyTorch's SDPA flash kernels (bench/README.md). Since then
// (not yet measured on a GPU) the query passes mask with one comparison per score and the
// forward skips the key tiles a warp's rows do not see, and the kernels read and write the
// projections' [B, T, H, E] in place (kernels::attention_layout). The forward of width 64 fits two
// blocks, 8 warps, per SM. Each kernel takes its tiling (kernels::flash::tiling: row tiles per
// warp, rows per staged tile, blocks per SM, queries in registers or shared memory) as a template
// argument: flash_attention_forward_tiled and _backward_tiled run any, and `tpx-bench-cuda
// attention-tilings` times the candidates beside the kernels' own (forward_tiling,
// backward_tiling), so that a GPU run chooses; FlashAttention-2's swizzled tiles (instead of
// padding) and its other tuning come after.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/check.hpp"
#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/kernels/warp_block.hpp"
#include "tpx/kernels/flash_attention.hpp"

namespace tpx::cuda {

namespace detail {

namespace flash = kernels::flash;

// The block index of this block, heaviest (last rows) first.
__device__ inline std::int64_t heaviest_first() { return gridDim.x - 1 - blockIdx.x; }

template <int HeadDim, class Tiling>
__global__ void __launch_bounds__(flash::threads, Tiling::min_blocks)
    flash_forward_kernel(flash::arguments args) {
  extern __shared__ __align__(16) unsigned char flash_staging[];
  warp_block block(flash_staging);
  flash::forward_block<HeadDim, Tiling>(block, args, heaviest_first(), blockIdx.y);
}

template <int HeadDim, class Tiling>
__global__ void __launch_bounds__(flash::threads, Tiling::min_blocks)
    flash_dq_kernel(flash::arguments args) {
  extern __shared__ __align__(16) unsigned char flash_staging[];
  warp_block block(flash_staging);
  flash::dq_block<HeadDim, Tiling>(block, args, heaviest_first(), blockIdx.y);
}

template <int HeadDim, class Tiling, bool Grouped>
__global__ void __launch_bounds__(flash::threads, Tiling::min_blocks)
    flash_dkdv_kernel(flash::arguments args) {
  extern __shared__ __align__(16) unsigned char flash_staging[];
  warp_block block(flash_staging);
  // Key blocks: the first keys are seen by the most queries, so block 0 is the heaviest.
  flash::dkdv_block<HeadDim, Tiling, Grouped>(block, args, blockIdx.x, blockIdx.y);
}

// The one-pass backward: a block per split of each sequence's key blocks, then one per 64 query
// rows adding the splits' dq shares.
template <int HeadDim, class Tiling>
__global__ void __launch_bounds__(flash::threads, Tiling::min_blocks)
    flash_one_pass_kernel(flash::arguments args, float* dq_shares, std::int64_t splits) {
  extern __shared__ __align__(16) unsigned char flash_staging[];
  warp_block block(flash_staging);
  flash::one_pass_block<HeadDim, Tiling>(block, args, dq_shares, splits, blockIdx.x, blockIdx.y,
                                         gridDim.y);
}

template <int HeadDim, class Tiling>
__global__ void __launch_bounds__(flash::threads)
    flash_sum_dq_kernel(flash::arguments args, const float* dq_shares, std::int64_t splits) {
  warp_block block(nullptr);
  flash::sum_dq_shares_block<HeadDim, Tiling>(block, args, dq_shares, splits, blockIdx.x,
                                              blockIdx.y, gridDim.y);
}

// Calls launch.template operator()<HeadDim>() for e = 32, 64 or 128.
template <class Launch>
void with_head_dim(int e, const Launch& launch) {
  if (e == 32)
    launch.template operator()<32>();
  else if (e == 64)
    launch.template operator()<64>();
  else
    launch.template operator()<128>();
}

// Blocks of block_rows rows over each sequence.
inline dim3 flash_grid(std::int64_t sequences, std::int64_t t_len, int block_rows) {
  return dim3(static_cast<unsigned>((t_len + block_rows - 1) / block_rows),
              static_cast<unsigned>(sequences));
}

// Lets `kernel` take `bytes` of dynamic shared memory: over 48 KiB a kernel must ask (the double
// buffers of width 128 take 68-69 KiB; sm_80 and sm_90 give a block up to 163 and 227 KiB).
template <class Kernel>
void allow_shared_memory(Kernel* kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    TPX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
}

inline bool device_has_bf16_mma() {
  int device = 0, major = 0;
  TPX_CUDA_CHECK(cudaGetDevice(&device));
  TPX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

}  // namespace detail

// Whether the tensor-core kernels take attention of head width e over these arrays.
inline bool flash_attention_applies(int e, std::initializer_list<const void*> arrays) {
  if (e != 32 && e != 64 && e != 128) return false;
  for (const void* p : arrays)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return detail::device_has_bf16_mma();
}

// Whether the tensor-core kernels address this shape's rows: their stride between a sequence's
// rows (heads x e elements on each side) is a 32-bit int, times up to a tile's rows.
inline bool flash_attention_addresses(kernels::attention_shape shape, int e) {
  return std::max(shape.queries.heads, shape.keys.heads) * e < (std::int64_t{1} << 24);
}

// The forward at head width HeadDim with a tiling of the caller's choice (kernels::flash::
// tiling; tpx-bench-cuda attention-tilings times several): flash_attention_forward below runs
// kernels::flash::forward_tiling. sequences <= 65535 (checked by the caller,
// cuda/kernels/fused_attention.hpp). The arrays are in `shape`'s layouts
// (kernels/fused_attention.hpp): heads first, or [B, T, H, E] read in place; a block of queries
// against every key, or whole sequences (attention_shape::whole_sequences).
template <int HeadDim, class Tiling>
void flash_attention_forward_tiled(cudaStream_t stream, std::int64_t sequences,
                                   kernels::attention_shape shape, float scale, const bf16* q,
                                   const bf16* k, const bf16* v, bf16* out, float* lse) {
  const kernels::flash::arguments args{shape,   scale,   q,       k,       v,       out,    lse,
                                       nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
  constexpr std::size_t bytes = kernels::flash::forward_shared_bytes<HeadDim, Tiling>;
  detail::allow_shared_memory(detail::flash_forward_kernel<HeadDim, Tiling>, bytes);
  detail::flash_forward_kernel<HeadDim, Tiling>
      <<<detail::flash_grid(sequences, shape.queries.t_len, Tiling::block_rows),
         kernels::flash::threads, bytes, stream>>>(args);
  TPX_CUDA_CHECK(cudaGetLastError());
}

// The backward passes, dq with DqTiling and dk-dv with DkdvTiling (one row tile per warp each):
// flash_attention_backward below runs kernels::flash::backward_tiling for both.
template <int HeadDim, class DqTiling, class DkdvTiling>
void flash_attention_backward_tiled(cudaStream_t stream, std::int64_t sequences,
                                    kernels::attention_shape shape, float scale, const bf16* q,
                                    const bf16* k, const bf16* v, const bf16* dout,
                                    const float* lse, const float* delta, bf16* dq, bf16* dk,
                                    bf16* dv) {
  const kernels::flash::arguments args{shape, scale, q,     k,  v,  nullptr, nullptr,
                                       lse,   dout,  delta, dq, dk, dv};
  constexpr std::size_t dq_bytes = kernels::flash::staged_bytes<HeadDim, DqTiling>;
  constexpr std::size_t dkdv_bytes = kernels::flash::dkdv_shared_bytes<HeadDim, DkdvTiling>;
  detail::allow_shared_memory(detail::flash_dq_kernel<HeadDim, DqTiling>, dq_bytes);
  detail::flash_dq_kernel<HeadDim, DqTiling>
      <<<detail::flash_grid(sequences, shape.queries.t_len, DqTiling::block_rows),
         kernels::flash::threads, dq_bytes, stream>>>(args);
  // Multi-head attention's dk-dv kernel has no loop over a group: the loop costs it registers.
  const auto dkdv = [&]<bool Grouped>() {
    detail::allow_shared_memory(detail::flash_dkdv_kernel<HeadDim, DkdvTiling, Grouped>,
                                dkdv_bytes);
    detail::flash_dkdv_kernel<HeadDim, DkdvTiling, Grouped>
        <<<detail::flash_grid(sequences / shape.group, shape.keys.t_len, DkdvTiling::block_rows),
           kernels::flash::threads, dkdv_bytes, stream>>>(args);
  };
  if (shape.group == 1)
    dkdv.template operator()<false>();
  else
    dkdv.template operator()<true>();
  TPX_CUDA_CHECK(cudaGetLastError());
}

// The splits of the one-pass backward over a sequence's key blocks (of 64 keys): enough for
// about 256 blocks in all, at most one per key block. A function of the shape alone, not of the
// device, so that the sums of dq, and so its bits, are the same on every GPU.
inline std::int64_t one_pass_splits(std::int64_t sequences, std::int64_t t_len) {
  const std::int64_t key_blocks = (t_len + 63) / 64;
  return std::max<std::int64_t>(1, std::min((256 + sequences - 1) / sequences, key_blocks));
}

// The backward in one pass over the key blocks (kernels::flash::one_pass_block: dk, dv and dq's
// shares in FlashAttention-2's 5 products per tile, where flash_attention_backward_tiled's two
// passes make 7), the shares (splits x sequences x T x HeadDim floats from `pool`) then added in
// split order: deterministic, without atomics. Not what the layers run: `tpx-bench-cuda
// attention-tilings` times it beside the two passes.
template <int HeadDim, class Tiling>
void flash_attention_backward_one_pass(cudaStream_t stream, cudaMemPool_t pool,
                                       std::int64_t sequences, kernels::attention_layout layout,
                                       float scale, const bf16* q, const bf16* k, const bf16* v,
                                       const bf16* dout, const float* lse, const float* delta,
                                       bf16* dq, bf16* dk, bf16* dv, std::int64_t splits) {
  const kernels::flash::arguments args{kernels::attention_shape::whole_sequences(layout),
                                       scale,
                                       q,
                                       k,
                                       v,
                                       nullptr,
                                       nullptr,
                                       lse,
                                       dout,
                                       delta,
                                       dq,
                                       dk,
                                       dv};
  auto shares = device_buffer<float>::for_overwrite(
      static_cast<std::size_t>(splits * sequences * layout.t_len * HeadDim), pool, stream);
  constexpr std::size_t bytes = kernels::flash::one_pass_shared_bytes<HeadDim, Tiling>;
  detail::allow_shared_memory(detail::flash_one_pass_kernel<HeadDim, Tiling>, bytes);
  detail::flash_one_pass_kernel<HeadDim, Tiling>
      <<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(sequences)),
         kernels::flash::threads, bytes, stream>>>(args, shares.data(), splits);
  detail::flash_sum_dq_kernel<HeadDim, Tiling>
      <<<detail::flash_grid(sequences, layout.t_len, Tiling::block_rows), kernels::flash::threads,
         0, stream>>>(args, shares.data(), splits);
  TPX_CUDA_CHECK(cudaGetLastError());
}

// The kernels' own tilings, at head width e (32, 64 or 128). Templates of their element type
// (bf16 alone) so that only a file that calls one compiles the kernels, not every file that
// includes tpx/cuda/cuda.hpp: as inline functions their launches instantiated all nine kernels
// in each (ptxas's 2 of the 23 seconds such a file took, sm_90 alone, and part of cicc's 7).
template <std::same_as<bf16> T>
void flash_attention_forward(cudaStream_t stream, std::int64_t sequences,
                             kernels::attention_shape shape, int e, float scale, const T* q,
                             const T* k, const T* v, T* out, float* lse) {
  detail::with_head_dim(e, [&]<int HeadDim>() {
    flash_attention_forward_tiled<HeadDim, kernels::flash::forward_tiling<HeadDim>>(
        stream, sequences, shape, scale, q, k, v, out, lse);
  });
}

template <std::same_as<bf16> T>
void flash_attention_backward(cudaStream_t stream, std::int64_t sequences,
                              kernels::attention_shape shape, int e, float scale, const T* q,
                              const T* k, const T* v, const T* dout, const float* lse,
                              const float* delta, T* dq, T* dk, T* dv) {
  using kernels::flash::backward_tiling;
  detail::with_head_dim(e, [&]<int HeadDim>() {
    flash_attention_backward_tiled<HeadDim, backward_tiling, backward_tiling>(
        stream, sequences, shape, scale, q, k, v, dout, lse, delta, dq, dk, dv);
  });
}

}  // namespace tpx::cuda

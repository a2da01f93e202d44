// The register fragments of the tensor-core instruction mma.sync.m16n8k16 (bf16 inputs, fp32
// accumulators), as functions of a lane: which elements of A (16x16), B (16x8) and C (16x8) each
// of a warp's 32 lanes holds, following the PTX ISA's "Matrix Fragments for mma.m16n8k16". With
// group = lane / 4 and pair = lane % 4:
//   A  4 registers of 2 bf16: rows group (registers 0, 2) and group + 8 (1, 3), columns
//      2 pair + {0, 1} (registers 0, 1) and 2 pair + 8 + {0, 1} (2, 3)
//   B  2 registers of 2 bf16: column group, rows 2 pair + {0, 1} (register 0) and + 8 (1),
//      loaded from shared memory by ldmatrix (8x8 matrices: lane l receives elements
//      (l / 4, 2 (l % 4) + {0, 1}) of each, or of its transpose with .trans)
//   C  4 floats: rows group (0, 1) and group + 8 (2, 3), columns 2 pair + {0, 1}
// The lower-indexed element of a pair sits in the low 16 bits of its register.
//
// These are host-device functions: the CUDA kernels (cuda/kernels/flash_attention.hpp) load
// their fragments with them, and the host tests run the same kernels on an emulated warp
// (tests/support/simt_block.hpp) whose mma is written from the PTX table independently.
// C's layout is two A half-columns side by side, so a product's accumulators become the next
// product's A operand without leaving registers (FlashAttention-2's P V and dS K).
#pragma once

#include <cstdint>

#include "tpx/core/bfloat16.hpp"
#include "tpx/core/config.hpp"

namespace tpx::kernels::mma {

struct lane_coordinates {
  int group;  // lane / 4: the row (A, C) or column (B) of the lane's first element
  int pair;   // lane % 4: which pair of columns (A, C) or rows (B)
  TPX_HOST_DEVICE explicit lane_coordinates(int lane) : group(lane >> 2), pair(lane & 3) {}
};

TPX_HOST_DEVICE inline std::uint32_t pack(bf16 low, bf16 high) {
  return static_cast<std::uint32_t>(low.bits) | (static_cast<std::uint32_t>(high.bits) << 16);
}

// Two consecutive elements p[0], p[1] (p 4-byte aligned on the device).
TPX_HOST_DEVICE inline std::uint32_t load_pair(const bf16* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const std::uint32_t*>(p);
#else
  return pack(p[0], p[1]);
#endif
}

// p[0], p[1] = low, high (p 4-byte aligned on the device): an accumulator pair's two columns
// stored as one 4-byte write.
TPX_HOST_DEVICE inline void store_pair(bf16* p, bf16 low, bf16 high) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<std::uint32_t*>(p) = pack(low, high);
#else
  p[0] = low;
  p[1] = high;
#endif
}

// A = rows [0, 16) x columns [0, 16) of a row-major matrix at pitch ld; rows at or past
// valid_rows read as zero (a tile that runs past the end of a sequence).
TPX_HOST_DEVICE inline void load_a(std::uint32_t (&a)[4], const bf16* m, std::int64_t ld,
                                   int valid_rows, lane_coordinates at) {
  const int rows[2] = {at.group, at.group + 8};
  for (int half = 0; half < 2; ++half) {
    const bool valid = rows[half] < valid_rows;
    const bf16* row = m + rows[half] * ld + 2 * at.pair;
    a[half] = valid ? load_pair(row) : 0u;
    a[half + 2] = valid ? load_pair(row + 8) : 0u;
  }
}

// The same A from shared memory with one ldmatrix.x4 (a warp operation: `block` is the hardware
// or the emulated block): matrix j is rows 8 (j % 2) .. + 7, columns 8 (j / 2) .. + 7, so lane l
// points at row l % 16, column 8 (l / 16), and register j comes out as load_a's register j.
template <class Block>
TPX_HOST_DEVICE void load_a_x4(Block& block, std::uint32_t (&a)[4], const bf16* m,
                               std::int64_t ld) {
  const int lane = block.lane();
  block.ldmatrix_x4(a, m + (lane & 15) * ld + 8 * (lane >> 4));
}

// A = the transpose of the 16 x 16 block at m (row-major, pitch ld): A[r][c] = m[c * ld + r], with
// one ldmatrix.x4.trans, each 8 x 8 matrix transposed as it loads. Matrix j is A's rows 8 (j % 2)
// .. + 7 and columns 8 (j / 2) .. + 7, stored at m's rows 8 (j / 2) .. and columns 8 (j % 2) ..,
// so lane l points at row 8 (l / 16) + l % 8, column 8 ((l / 8) % 2).
template <class Block>
TPX_HOST_DEVICE void load_a_transposed_x4(Block& block, std::uint32_t (&a)[4], const bf16* m,
                                          std::int64_t ld) {
  const int lane = block.lane();
  block.ldmatrix_x4_trans(a, m + (8 * (lane >> 4) + (lane & 7)) * ld + 8 * ((lane >> 3) & 1));
}

// Two B fragments from shared memory with one ldmatrix.x4 (a warp operation: `block` is the
// hardware or the emulated block): b[j] holds B_j[k][n] = m[n * ld + 16 j + k], the transposes
// of two 8x16 blocks side by side in 8 rows of m (8 keys of K, two k-steps of the scores Q K^T).
// Lane l points at row l % 8 of 8x8 matrix l / 8; matrix 2 j + h is b[j]'s register h.
template <class Block>
TPX_HOST_DEVICE void load_b_transposed_x2(Block& block, std::uint32_t (&b)[2][2], const bf16* m,
                                          std::int64_t ld) {
  const int lane = block.lane(), matrix = lane >> 3;
  std::uint32_t r[4];
  block.ldmatrix_x4(r, m + (lane & 7) * ld + 8 * matrix);
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

// Two B fragments with one ldmatrix.x4.trans: b[j] holds B_j[k][n] = m[k * ld + 8 j + n], two
// 16x8 blocks side by side in 16 rows of m as they stand (16 keys of V, two column tiles of
// P V). Matrix 2 j + h is rows 8 h .. 8 h + 7 of block j, transposed into b[j]'s register h.
template <class Block>
TPX_HOST_DEVICE void load_b_x2(Block& block, std::uint32_t (&b)[2][2], const bf16* m,
                               std::int64_t ld) {
  const int lane = block.lane(), matrix = lane >> 3;
  std::uint32_t r[4];
  block.ldmatrix_x4_trans(r, m + (8 * (matrix & 1) + (lane & 7)) * ld + 8 * (matrix >> 1));
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

// The A operand (16x16, bf16) made of two accumulator tiles: columns 0-7 from `left`, 8-15
// from `right`, each rounded to bf16.
TPX_HOST_DEVICE inline void a_from_accumulators(std::uint32_t (&a)[4], const float (&left)[4],
                                                const float (&right)[4]) {
  a[0] = pack(bf16(left[0]), bf16(left[1]));
  a[1] = pack(bf16(left[2]), bf16(left[3]));
  a[2] = pack(bf16(right[0]), bf16(right[1]));
  a[3] = pack(bf16(right[2]), bf16(right[3]));
}

// The row (0..15) and column (0..7) of accumulator element i (0..3) of a lane.
TPX_HOST_DEVICE inline int accumulator_row(lane_coordinates at, int i) {
  return at.group + 8 * (i >> 1);
}
TPX_HOST_DEVICE inline int accumulator_column(lane_coordinates at, int i) {
  return 2 * at.pair + (i & 1);
}

}  // namespace tpx::kernels::mma

// simt_block: one CUDA thread block emulated on the host, so that a block program written for
// the GPU (kernels/flash_attention.hpp) runs, and is checked, on a machine without one.
//
// run(program) runs program(thread) for every CUDA thread of the block, each a fiber of
// tests/support/fiber_team.hpp on the calling thread, where `thread` offers what the block
// programs use of the hardware: its lane and warp, sync() (__syncthreads), shfl_xor
// (__shfl_xor_sync over the full warp), mma (mma.sync.m16n8k16, bf16 inputs, fp32 accumulators:
// d += a b), ldmatrix_x4 and ldmatrix_x4_trans (ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16),
// cp.async's copy, commit and wait, and the block's shared memory.
//
// A warp-wide operation is one barrier of the warp: each lane posts its operands in its slot,
// passes the barrier, and reads what it needs of the other lanes' slots. Operations alternate
// between two sets of slots: a lane that hurries on posts into the other set, and the set it read
// is written again only after the next barrier, which every reader of this one must have reached
// first. That is one barrier per operation instead of two (a second one freeing the slots).
// Like the hardware, every lane (thread) must reach every warp operation in the same order; a
// program that does not deadlocks, and run() throws naming where each lane waits.
//
// Only sync() and the warp operations order the lanes, and ThreadSanitizer is told so
// (fiber_team.hpp): under it (CI's tsan stage runs the unit tests) a program that reads shared
// memory another lane wrote with no sync() between them is reported as a data race, as
// compute-sanitizer's racecheck would on the GPU: removing the sync after flash attention's key
// staging (over_staged_tiles) gives 308 reports in the first attention test case, in ldmatrix,
// copy_async_16 and key_block_gradients. The lanes take turns in a fixed order, so such a
// program also reads the same stale values in every run: without TSan, the same change fails
// 1559 of the attention test's checks.
//
// mma and ldmatrix are written from the PTX ISA's tables ("Matrix Fragments for mma.m16n8k16",
// "ldmatrix"), element by element, independently of kernels/mma_fragments.hpp, which the
// kernels use to load their operands: a test that passes here has the kernels' loads agree with the
// documented layout. Products of bf16 are exact in fp32; the sum runs in k order (the hardware's
// order within an mma is unspecified, so results agree to fp32 rounding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tpx/core/bfloat16.hpp>
#include <vector>

#include "fiber_team.hpp"

namespace tpx::testing {

class simt_block {
  struct lane_slot {  // what a lane posts for a warp-wide operation
    std::uint32_t a[4];
    std::uint32_t b[2];
    float value;
    const bf16* row;  // ldmatrix's row address
  };

 public:
  class thread_context;

  simt_block(int warps, std::size_t shared_bytes)
      : warps_(warps),
        shared_(shared_bytes),
        lanes_(32 * warps),
        block_barrier_(lanes_, 32 * warps, "__syncthreads"),
        slots_(2 * 32 * static_cast<std::size_t>(warps)) {
    warp_barriers_.reserve(warps);
    for (int w = 0; w < warps; ++w)
      warp_barriers_.push_back(std::make_unique<fiber_team::barrier>(
          lanes_, 32, std::string("warp ").append(std::to_string(w)).append("'s operation")));
  }

  // Runs program(thread_context&) on every thread of the block; returns when all have returned.
  template <class Program>
  void run(const Program& program) {
    lanes_.run([this, &program](int t) {
      thread_context context(*this, t);
      program(context);
    });
  }

  class thread_context {
   public:
    int lane() const { return index_ % 32; }
    int warp() const { return index_ / 32; }
    int thread() const { return index_; }
    unsigned char* shared() { return block_.shared_.data(); }
    void sync() { block_.block_barrier_.arrive_and_wait(); }

    float shfl_xor(float value, int mask) {
      post().value = value;
      meet();
      return posted(lane() ^ mask).value;
    }

    void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
      lane_slot& mine = post();
      for (int i = 0; i < 4; ++i) mine.a[i] = a[i];
      for (int i = 0; i < 2; ++i) mine.b[i] = b[i];
      meet();
      // This lane's c0..c3 lie in rows `group` and `group + 8` of D and columns 2 pair and
      // 2 pair + 1: it reads the rows of A from the lanes holding them (those of its group) and
      // the columns of B likewise, a sixth of the warp's operands.
      const int my_group = lane() / 4, my_pair = lane() % 4;
      float a_matrix[16][16], b_matrix[16][8];
      for (int l = 0; l < 32; ++l) {
        const int group = l / 4, pair = l % 4;
        if (group == my_group) {
          const lane_slot& s = posted(l);
          for (int i = 0; i < 8; ++i) {  // a0..a7: register i / 2, half i % 2
            const int row = group + 8 * ((i / 2) % 2), col = 2 * pair + (i % 2) + 8 * (i / 4);
            a_matrix[row][col] = element(s.a[i / 2], i % 2);
          }
        }
        if (group / 2 == my_pair) {
          const lane_slot& s = posted(l);
          for (int i = 0; i < 4; ++i) {  // b0..b3
            const int row = 2 * pair + (i % 2) + 8 * (i / 2), col = group;
            b_matrix[row][col] = element(s.b[i / 2], i % 2);
          }
        }
      }
      for (int i = 0; i < 4; ++i) {  // c0..c3
        const int row = my_group + 8 * (i / 2), col = 2 * my_pair + (i % 2);
        float sum = d[i];
        for (int k = 0; k < 16; ++k) sum += a_matrix[row][k] * b_matrix[k][col];
        d[i] = sum;
      }
    }

    // Four 8x8 matrices of 16-bit elements: lanes 8j .. 8j + 7 give the addresses of matrix j's
    // rows 0..7; lane l receives in register j the elements (l / 4, 2 (l % 4)) and
    // (l / 4, 2 (l % 4) + 1) of matrix j, or with `transpose` those of its transpose.
    void ldmatrix_x4(std::uint32_t (&r)[4], const bf16* row) { ldmatrix(r, row, false); }
    void ldmatrix_x4_trans(std::uint32_t (&r)[4], const bf16* row) { ldmatrix(r, row, true); }

    // cp.async of 16 bytes (8 elements), zeros where !real; here the copy is done at once,
    // one of the orders the hardware may take, so commit and wait have nothing to do.
    void copy_async_16(bf16* to, const bf16* from, bool real) {
      for (int i = 0; i < 8; ++i) to[i] = real ? from[i] : bf16(0.0f);
    }
    void commit_async() {}
    void wait_async_all_but_latest() {}
    void wait_async_all() {}

   private:
    friend class simt_block;
    void ldmatrix(std::uint32_t (&r)[4], const bf16* row, bool transpose) {
      post().row = row;
      meet();
      const int l = lane();
      for (int j = 0; j < 4; ++j) {
        const auto at = [&](int matrix_row, int matrix_column) {
          return posted(8 * j + matrix_row).row[matrix_column];
        };
        bf16 first, second;
        if (transpose) {
          first = at(2 * (l % 4), l / 4);
          second = at(2 * (l % 4) + 1, l / 4);
        } else {
          first = at(l / 4, 2 * (l % 4));
          second = at(l / 4, 2 * (l % 4) + 1);
        }
        r[j] = static_cast<std::uint32_t>(first.bits) |
               (static_cast<std::uint32_t>(second.bits) << 16);
      }
    }
    thread_context(simt_block& block, int index) : block_(block), index_(index) {}
    static float element(std::uint32_t reg, int half) {
      bf16 x;
      x.bits = static_cast<std::uint16_t>(half == 0 ? reg & 0xffffu : reg >> 16);
      return static_cast<float>(x);
    }
    // This lane's slot in the next warp operation's set of slots, for its operands.
    lane_slot& post() {
      set_ ^= 1;
      return block_.slots_[slot_index(lane())];
    }
    // Waits until every lane of the warp has posted its operands.
    void meet() { block_.warp_barriers_[warp()]->arrive_and_wait(); }
    // What `from_lane` of this warp posted for the operation under way (after meet()).
    const lane_slot& posted(int from_lane) const { return block_.slots_[slot_index(from_lane)]; }
    std::size_t slot_index(int in_warp) const {
      return static_cast<std::size_t>((set_ * block_.warps_ + warp()) * 32 + in_warp);
    }

    simt_block& block_;
    int index_;
    int set_ = 1;  // the set of slots of the operation under way (the first one uses set 0)
  };

 private:
  int warps_;
  std::vector<unsigned char> shared_;
  fiber_team lanes_;  // one fiber per thread of the block
  fiber_team::barrier block_barrier_;
  std::vector<std::unique_ptr<fiber_team::barrier>> warp_barriers_;
  std::vector<lane_slot> slots_;  // two sets of 32 per warp: [set][warp][lane]
};

}  // namespace tpx::testing

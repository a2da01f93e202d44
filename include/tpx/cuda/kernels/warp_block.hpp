// warp_block: what a tensor-core block program (kernels/flash_attention.hpp) asks of the
// hardware, on the GPU: the thread's lane and warp, __syncthreads, a full-warp shuffle, the
// block's dynamic shared memory, cp.async, ldmatrix.x4 (plain and .trans) and mma.sync.m16n8k16
// with bf16 inputs and fp32 accumulators (sm_80 and newer; the dispatcher never launches these
// kernels on older devices). The host tests run the same programs on tests/support/simt_block.hpp,
// which offers the same members.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tpx/core/bfloat16.hpp"

namespace tpx::cuda::detail {

class warp_block {
 public:
  __device__ explicit warp_block(unsigned char* shared) : shared_(shared) {}
  __device__ int lane() const { return static_cast<int>(threadIdx.x & 31u); }
  __device__ int warp() const { return static_cast<int>(threadIdx.x >> 5); }
  __device__ int thread() const { return static_cast<int>(threadIdx.x); }
  __device__ unsigned char* shared() const { return shared_; }
  __device__ void sync() const { __syncthreads(); }
  __device__ float shfl_xor(float value, int mask) const {
    return __shfl_xor_sync(0xffffffffu, value, mask);
  }

  // Four 8x8 matrices of 16-bit elements from shared memory, row addresses from lanes 8j..8j+7
  // for matrix j (kernels/mma_fragments.hpp's load_b_x2 and load_b_transposed_x2).
  __device__ void ldmatrix_x4(std::uint32_t (&r)[4], const bf16* row) const {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
  }
  __device__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const bf16* row) const {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
  }

  // 16 bytes from global to shared memory without passing through registers (cp.async.cg,
  // cached in L2 only); with !real it writes zeros and reads nothing. A commit closes a group
  // of copies; the waits block until all groups but the latest, or all, have landed.
  __device__ void copy_async_16(bf16* to, const bf16* from, bool real) const {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :
                 : "r"(shared_address(to)), "l"(from), "r"(real ? 16 : 0));
  }
  __device__ void commit_async() const { asm volatile("cp.async.commit_group;\n" ::); }
  __device__ void wait_async_all_but_latest() const { asm volatile("cp.async.wait_group 1;\n" ::); }
  __device__ void wait_async_all() const { asm volatile("cp.async.wait_group 0;\n" ::); }

  // d += a b over one warp (the fragment layouts: kernels/mma_fragments.hpp).
  __device__ void mma(float (&d)[4], const std::uint32_t (&a)[4],
                      const std::uint32_t (&b)[2]) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    __trap();
#endif
  }

 private:
  __device__ static std::uint32_t shared_address(const void* p) {
    return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
  }

  unsigned char* shared_;
};

}  // namespace tpx::cuda::detail

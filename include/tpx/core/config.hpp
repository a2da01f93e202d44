// Build-wide switches shared by every tpx header.
//
// TPX_HOST_DEVICE marks the functions that hold a kernel's per-element math: the host backend
// calls them in plain loops and the CUDA backend calls the very same functions inside kernels,
// so the host tests cover the arithmetic the GPU runs. Under nvcc it expands to
// `__host__ __device__`; under a host compiler it expands to nothing.
#pragma once

#if defined(__CUDACC__)
#define TPX_HOST_DEVICE __host__ __device__
#else
#define TPX_HOST_DEVICE
#endif

// TPX_UNROLL before a loop asks nvcc to unroll it: a loop over a register fragment's elements
// (kernels/flash_attention.hpp) must be unrolled for the fragment to stay in registers, and
// nvcc's own heuristics stop short of the widest ones. Host compilers leave it to their
// optimizer (g++ warns about an unknown #pragma unroll), so does nvcc's host pass.
#if defined(__CUDA_ARCH__)
#define TPX_UNROLL _Pragma("unroll")
#else
#define TPX_UNROLL
#endif

// tpx/cuda/cuda.hpp: the CUDA backend of tpx, for .cu files compiled by nvcc (target tpx::cuda).
//
//   #include <tpx/cuda/cuda.hpp>
//   tpx::spmd(tpx::cuda_simulated, tpx::Mesh<X, Y>{2, 2}, [](auto& rank) {   // one GPU
//     auto in = tpx::randn<float, B<X>, D<Y>>(rank, {B(8), D(16)}, 1);       // a DeviceTensor
//     auto w  = tpx::randn<float, D<X>, F<Y>>(rank, {D(16), F(32)}, 2);
//     auto t  = tpx::matmul(in, w);   // the same collectives, now on the GPU; cuBLASLt GEMM
//   });
//   tpx::spmd(tpx::cuda_devices, mesh, fn);                     // one GPU per rank, NCCL
//   tpx::cuda::run_rank(mesh, {id, world_rank, device}, fn);    // one process per GPU
//   tpx::cuda::run_launched_rank(mesh, fn);    // the same under torchrun or srun, no MPI
//
// What is where: device_space.hpp (DeviceTensor's memory space), device_rank.hpp (the rank a
// CUDA launcher passes), rank_resources.hpp (per-rank stream, pool, cuBLASLt), gemm.hpp and
// gemm_plan.hpp (cuBLASLt), kernels/ (the launches of the shared kernels/ functors),
// simulated_communicator.hpp and spmd_simulated.hpp (many ranks, one GPU),
// nccl_communicator.hpp, nccl_mesh.hpp and spmd_nccl.hpp (NCCL), nccl_launch.hpp (processes
// started by torchrun or srun: the id over tpx/launch's TCP rendezvous), device.hpp (is there a GPU?),
// check.hpp and nvtx.hpp (errors with file:line; Nsight ranges). docs/gpus.md tells the story.
#pragma once

#include "tpx/cuda/device.hpp"
#include "tpx/cuda/device_rank.hpp"
#include "tpx/cuda/device_space.hpp"
#include "tpx/cuda/gemm.hpp"
#include "tpx/cuda/kernels/adamw.hpp"
#include "tpx/cuda/kernels/elementwise.hpp"
#include "tpx/cuda/kernels/norms.hpp"
#include "tpx/cuda/kernels/reduce.hpp"
#include "tpx/cuda/kernels/softmax.hpp"
#include "tpx/cuda/nccl_launch.hpp"
#include "tpx/cuda/spmd_nccl.hpp"
#include "tpx/cuda/spmd_simulated.hpp"
#include "tpx/tpx.hpp"

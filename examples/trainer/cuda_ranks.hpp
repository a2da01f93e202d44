// The CUDA trainers' training loop of one rank (training.hpp's train_rank on a
// cuda::DeviceRank) is compiled once per model family and compute type, each in a file of its
// own: cuda_rank_fp32.cu and cuda_rank_bf16.cu here and in examples/gpt, the object library
// tpx_trainer_cuda_ranks (examples/trainer_ranks.cmake) that tpx-train-cuda, tpx-gpt-cuda and
// cuda_trainer_test link. The loop and the kernels it instantiates were most of a program's
// compile time: tpx-train-cuda in one file took 202 s on one core (101 s in the host compiler,
// 66 s in nvcc's two device passes). Split, its fp32 and bf16 halves and its main build in
// parallel, and the test compiles neither again. Every CUDA launcher's ranks are DeviceRanks
// (their communicators are type-erased), so one instantiation serves them all.
//
// TPX_TRAINER_CUDA_RANK(Tc, Family) names one as an explicit instantiation does: `extern
// template TPX_TRAINER_CUDA_RANK(float, trainer::mlp);` where it is used (below for the MLP,
// gpt/cuda_ranks.hpp for the GPT), `template TPX_TRAINER_CUDA_RANK(float, trainer::mlp);` in
// the file that compiles it.
#pragma once

#include <tpx/cuda/cuda.hpp>

#include "training.hpp"

#define TPX_TRAINER_CUDA_RANK(Tc, Family) \
  TPX_TRAINER_TRAIN_RANK(Tc, Family, tpx::cuda::DeviceRank<Family::mesh>)

extern template TPX_TRAINER_CUDA_RANK(float, trainer::mlp);
extern template TPX_TRAINER_CUDA_RANK(tpx::bf16, trainer::mlp);

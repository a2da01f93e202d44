// The CUDA trainers' training loops of one rank (training.hpp's train_rank on a
// tpx::cuda::DeviceRank, the rank of every CUDA launcher: simulated, NCCL, torchrun and mpirun
// alike), fp32 and bf16, are compiled once per model family in a file of their own, as the host
// trainers' are (host_ranks.hpp): device_ranks.cu here and in examples/gpt, the object libraries
// tpx_trainer_device_ranks and tpx_gpt_device_ranks (examples/trainer_ranks.cmake) that
// tpx-train-cuda, tpx-gpt-cuda and cuda_trainer_test link. tpx-gpt-cuda's one file took 165 s
// under nvcc (sm_90 alone, this machine, `ninja -j1`), the longest of the CUDA build; its
// launchers and its loops then took 69 s and 107 s side by side, so that a machine of two cores
// or more builds it in two thirds of the time (a file per compute type took 88 s each: the two
// share most of their code). cuda_trainer_test, which ran both families, compiles their loops no
// more. The launchers' file shrank again when the command line moved out (command_line.hpp);
// docs/ci.md has the figures of all three programs.
//
// TPX_TRAINER_DEVICE_RANK(Tc, Family) names one as an explicit instantiation does: `extern
// template TPX_TRAINER_DEVICE_RANK(float, trainer::mlp);` where it is used (below for the MLP and
// for it cut into pipeline stages, gpt/device_ranks.hpp for the GPT), `template
// TPX_TRAINER_DEVICE_RANK(float, trainer::mlp);` in the file that compiles it
// (device_ranks_pipelined.cu for the pipelined MLP's). Include this after cuda_main.hpp, as
// host_ranks.hpp after launch_main.hpp: training.hpp's qualified tpx::spmd calls see only the
// launchers declared before it.
#pragma once

#include <tpx/cuda/cuda.hpp>

#include "mlp_family.hpp"
#include "pipelined_family.hpp"
#include "training.hpp"

#define TPX_TRAINER_DEVICE_RANK(Tc, Family)                                      \
  void trainer::train_rank<Tc, Family, tpx::cuda::DeviceRank<Family::mesh>>(     \
      tpx::cuda::DeviceRank<Family::mesh>&, const trainer::run_options<Family>&, \
      const trainer::checkpointing&, const trainer::text_data&,                  \
      const std::function<void(const trainer::step_report&)>&)

extern template TPX_TRAINER_DEVICE_RANK(float, trainer::mlp);
extern template TPX_TRAINER_DEVICE_RANK(tpx::bf16, trainer::mlp);
extern template TPX_TRAINER_DEVICE_RANK(float, trainer::pipelined_mlp);
extern template TPX_TRAINER_DEVICE_RANK(tpx::bf16, trainer::pipelined_mlp);

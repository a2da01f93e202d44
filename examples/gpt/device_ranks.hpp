// The GPT example's training loops of one CUDA rank, fp32 and bf16, compiled once in
// device_ranks.cu beside it and linked by tpx-gpt-cuda and cuda_trainer_test, as the MLP's are
// (examples/trainer/device_ranks.hpp says why).
//
// The model's forward and backward passes on a CUDA rank (its three layouts in both compute types)
// are compiled apart, in device_model.cu, and declared here, as the host's are (host_ranks.hpp), so
// that cuda_trainer_test, which runs the fp32 model on the simulated CUDA mesh, no longer compiles
// them again. Measured on this machine, nvcc 13 for sm_80 and sm_90 with ccache off, one file at a
// time: device_ranks.cu took 153 s before, 63 s now beside device_model.cu's 117 s, and
// cuda_trainer_test's trainer_test.cu 152 s before, 74 s now (305 s before, 253 s now). Unlike the
// host's, the model is one file: every nvcc file parses tpx's headers four times, and the two
// compute types share most of their code (examples/trainer/device_ranks.hpp).
#pragma once

#include "../trainer/device_ranks.hpp"
#include "family.hpp"

extern template TPX_TRAINER_DEVICE_RANK(float, gpt::family);
extern template TPX_TRAINER_DEVICE_RANK(tpx::bf16, gpt::family);

TPX_GPT_LAYOUTS(extern template, float, tpx::cuda::device_space);
TPX_GPT_LAYOUTS(extern template, tpx::bf16, tpx::cuda::device_space);

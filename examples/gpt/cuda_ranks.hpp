// The GPT example's training loop of one CUDA rank, fp32 and bf16, compiled once each in
// cuda_rank_fp32.cu and cuda_rank_bf16.cu beside it and linked by tpx-gpt-cuda and
// cuda_trainer_test, as the MLP's are (examples/trainer/cuda_ranks.hpp says why).
#pragma once

#include "../trainer/cuda_ranks.hpp"
#include "family.hpp"

extern template TPX_TRAINER_CUDA_RANK(float, gpt::family);
extern template TPX_TRAINER_CUDA_RANK(tpx::bf16, gpt::family);

// The GPT example's training loops of one CUDA rank, fp32 and bf16, compiled once in
// device_ranks.cu beside it and linked by tpx-gpt-cuda and cuda_trainer_test, as the MLP's are
// (examples/trainer/device_ranks.hpp says why).
#pragma once

#include "../trainer/device_ranks.hpp"
#include "family.hpp"

extern template TPX_TRAINER_DEVICE_RANK(float, gpt::family);
extern template TPX_TRAINER_DEVICE_RANK(tpx::bf16, gpt::family);

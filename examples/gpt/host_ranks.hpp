// The GPT example's training loop of one host rank, fp32 and bf16, compiled once each in
// host_rank_fp32.cpp and host_rank_bf16.cpp beside it and linked by tpx-gpt and the trainer
// tests, as the MLP's are (examples/trainer/host_ranks.hpp says why).
#pragma once

#include "../trainer/host_ranks.hpp"
#include "family.hpp"

extern template TPX_TRAINER_HOST_RANK(float, gpt::family);
extern template TPX_TRAINER_HOST_RANK(tpx::bf16, gpt::family);

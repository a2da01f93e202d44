// The training loop of one CUDA rank of tpx-train-cuda's MLP in bf16, compiled here once
// (cuda_ranks.hpp says why).
#include "cuda_ranks.hpp"

template TPX_TRAINER_CUDA_RANK(tpx::bf16, trainer::mlp);

// The training loops of one CUDA rank of tpx-train-cuda's MLP, fp32 and bf16, compiled here once
// (device_ranks.hpp says why).
#include "device_ranks.hpp"

template TPX_TRAINER_DEVICE_RANK(float, trainer::mlp);
template TPX_TRAINER_DEVICE_RANK(tpx::bf16, trainer::mlp);

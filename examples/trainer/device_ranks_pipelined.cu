// The training loops of one CUDA rank of tpx-train-cuda --pipeline's model (the MLP cut into
// pipeline stages), fp32 and bf16, compiled here once, beside device_ranks.cu's MLP so that a
// machine of two cores builds both at once (device_ranks.hpp says why).
#include "device_ranks.hpp"

template TPX_TRAINER_DEVICE_RANK(float, trainer::pipelined_mlp);
template TPX_TRAINER_DEVICE_RANK(tpx::bf16, trainer::pipelined_mlp);

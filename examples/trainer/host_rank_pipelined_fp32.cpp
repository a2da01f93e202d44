// The training loop of one host rank of tpx-train --pipeline's model in fp32, compiled here once
// (host_ranks.hpp says why).
#include "host_ranks.hpp"

template TPX_TRAINER_HOST_RANK(float, trainer::pipelined_mlp);

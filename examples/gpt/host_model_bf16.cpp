// The GPT model's forward and backward passes on the host in bf16, its three layouts, compiled
// here once (host_ranks.hpp says why).
#include "host_ranks.hpp"

template TPX_GPT_FORWARD_BACKWARD(tpx::bf16, tpx::host_space, sequence_parallel);
template TPX_GPT_FORWARD_BACKWARD(tpx::bf16, tpx::host_space, plain_tensor_parallel);
template TPX_GPT_FORWARD_BACKWARD(tpx::bf16, tpx::host_space, context_parallel);

// The GPT model's forward and backward passes on the host in fp32, its three layouts, compiled
// here once (host_ranks.hpp says why).
#include "host_ranks.hpp"

template TPX_GPT_FORWARD_BACKWARD(float, tpx::host_space, sequence_parallel);
template TPX_GPT_FORWARD_BACKWARD(float, tpx::host_space, plain_tensor_parallel);
template TPX_GPT_FORWARD_BACKWARD(float, tpx::host_space, context_parallel);

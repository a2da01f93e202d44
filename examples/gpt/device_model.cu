// The GPT model's forward and backward passes on a CUDA rank, fp32 and bf16, its three layouts,
// compiled here once (device_ranks.hpp says why).
#include "device_ranks.hpp"

template TPX_GPT_FORWARD_BACKWARD(float, tpx::cuda::device_space, sequence_parallel);
template TPX_GPT_FORWARD_BACKWARD(float, tpx::cuda::device_space, plain_tensor_parallel);
template TPX_GPT_FORWARD_BACKWARD(float, tpx::cuda::device_space, context_parallel);
template TPX_GPT_FORWARD_BACKWARD(tpx::bf16, tpx::cuda::device_space, sequence_parallel);
template TPX_GPT_FORWARD_BACKWARD(tpx::bf16, tpx::cuda::device_space, plain_tensor_parallel);
template TPX_GPT_FORWARD_BACKWARD(tpx::bf16, tpx::cuda::device_space, context_parallel);

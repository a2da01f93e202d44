// The GPT model's forward and backward passes on meta tensors, fp32 and bf16, its three layouts,
// compiled here once for --dry-run (dry_run_model.hpp says why).
#include "dry_run_model.hpp"

template TPX_GPT_FORWARD_BACKWARD(float, tpx::meta_space, sequence_parallel);
template TPX_GPT_FORWARD_BACKWARD(float, tpx::meta_space, plain_tensor_parallel);
template TPX_GPT_FORWARD_BACKWARD(float, tpx::meta_space, context_parallel);
template TPX_GPT_FORWARD_BACKWARD(tpx::bf16, tpx::meta_space, sequence_parallel);
template TPX_GPT_FORWARD_BACKWARD(tpx::bf16, tpx::meta_space, plain_tensor_parallel);
template TPX_GPT_FORWARD_BACKWARD(tpx::bf16, tpx::meta_space, context_parallel);

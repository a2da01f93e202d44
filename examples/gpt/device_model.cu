// The GPT model's forward and backward passes on a CUDA rank, fp32 and bf16, its three layouts,
// compiled here once (device_ranks.hpp says why).
#include "device_ranks.hpp"

TPX_GPT_LAYOUTS(template, float, tpx::cuda::device_space);
TPX_GPT_LAYOUTS(template, tpx::bf16, tpx::cuda::device_space);

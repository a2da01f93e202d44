// The GPT model's forward and backward passes on the host in bf16, its three layouts, compiled
// here once (host_ranks.hpp says why).
#include "host_ranks.hpp"

TPX_GPT_LAYOUTS(template, tpx::bf16, tpx::host_space);

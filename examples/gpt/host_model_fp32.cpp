// The GPT model's forward and backward passes on the host in fp32, its three layouts, compiled
// here once (host_ranks.hpp says why).
#include "host_ranks.hpp"

TPX_GPT_LAYOUTS(template, float, tpx::host_space);

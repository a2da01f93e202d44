// The GPT model's forward and backward passes on meta tensors, fp32 and bf16, its three layouts,
// compiled here once for --dry-run (dry_run_model.hpp says why).
#include "dry_run_model.hpp"

TPX_GPT_LAYOUTS(template, float, tpx::meta_space);
TPX_GPT_LAYOUTS(template, tpx::bf16, tpx::meta_space);

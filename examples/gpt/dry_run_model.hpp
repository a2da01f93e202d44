// The GPT model's forward and backward passes on meta tensors (tpx::meta_space), which --dry-run
// runs, fp32 and bf16, compiled once in dry_run_model.cpp beside the dry run's own file
// (dry_run.cpp), which declares them from here. In one file they took 47 s (g++ 12 at -O3, alone
// on this machine), the longest of tpx-gpt's files once the loops' model had moved out
// (host_ranks.hpp); apart, 11 s and 38 s, which a machine of two cores or more builds side by
// side (docs/ci.md).
#pragma once

#include <tpx/tensor/meta_space.hpp>

#include "family.hpp"

TPX_GPT_LAYOUTS(extern template, float, tpx::meta_space);
TPX_GPT_LAYOUTS(extern template, tpx::bf16, tpx::meta_space);

// --dry-run of tpx-gpt and tpx-gpt-cuda (the GPT's dry_run_main), compiled here once for both
// (trainer/dry_run.hpp says why).
#include "../trainer/dry_run_main.hpp"
#include "dry_run_model.hpp"  // family.hpp, and the model on meta tensors compiled apart

template TPX_TRAINER_DRY_RUN(gpt::family);

// --dry-run of tpx-train and tpx-train-cuda (the MLP's dry_run_main) and of tpx-train --pipeline
// (the pipelined MLP's), compiled here once for all (trainer/dry_run.hpp says why).
#include "dry_run_main.hpp"
#include "mlp_family.hpp"
#include "pipelined_family.hpp"

template TPX_TRAINER_DRY_RUN(trainer::mlp);
template TPX_TRAINER_DRY_RUN(trainer::pipelined_mlp);

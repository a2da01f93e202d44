// --dry-run of tpx-train and tpx-train-cuda (the MLP's dry_run_main), compiled here once for both
// (trainer/dry_run.hpp says why).
#include "dry_run_main.hpp"
#include "mlp_family.hpp"

template TPX_TRAINER_DRY_RUN(trainer::mlp);

// --dry-run of the example trainers (tpx-train, tpx-gpt and their CUDA twins): what a training
// step of the run the other flags describe would take on each rank of its mesh, without
// computing or moving anything (tpx::spmd(tpx::dry_run, ...)): tensor memory per rank, matrix
// FLOPs, and what the collectives move over each mesh axis. A user sizes a mesh for a model with
// it before asking a cluster for GPUs; the figures are those of the program the GPU runs, for any
// mesh, on any machine (examples/trainer/README.md, "Sizing a run without running it").
//
// This header declares dry_run_main<Family>; dry_run_main.hpp defines it. Each family's is
// compiled once, in a C++ file of its own (trainer/dry_run.cpp, gpt/dry_run.cpp; the object
// libraries tpx_trainer_dry_run and tpx_gpt_dry_run, examples/trainer_ranks.cmake), and linked by
// the host and CUDA programs alike, as the command line is (command_line.hpp).
//
// TPX_TRAINER_DRY_RUN(Family) names one as an explicit instantiation does:
// `template TPX_TRAINER_DRY_RUN(trainer::mlp);` in the file that compiles it.
#pragma once

#include "command_line.hpp"

namespace trainer {

// Runs the dry run the command line asks for and prints its report (and writes it, as one JSON
// object, to --log); returns the process's exit code. `program` names the program in the report
// and in errors.
template <class Family>
int dry_run_main(const char* program, const command_line<Family>& c);

}  // namespace trainer

#define TPX_TRAINER_DRY_RUN(Family) \
  int trainer::dry_run_main<Family>(const char*, const trainer::command_line<Family>&)

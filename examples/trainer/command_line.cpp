// The command lines of tpx-train and tpx-train-cuda (the MLP's parse_command_line) and of
// tpx-train --pipeline (the pipelined MLP's), compiled here once for all (command_line.hpp says
// why).
#include "mlp_family.hpp"
#include "parse_command_line.hpp"
#include "pipelined_family.hpp"

template TPX_TRAINER_COMMAND_LINE(trainer::mlp);
template TPX_TRAINER_COMMAND_LINE(trainer::pipelined_mlp);

// The command line of tpx-train and tpx-train-cuda (the MLP's parse_command_line), compiled here
// once for both (command_line.hpp says why).
#include "mlp_family.hpp"
#include "parse_command_line.hpp"

template TPX_TRAINER_COMMAND_LINE(trainer::mlp);

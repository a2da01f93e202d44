// The command line of tpx-gpt and tpx-gpt-cuda (the GPT's parse_command_line), compiled here once
// for both (trainer/command_line.hpp says why).
#include "../trainer/parse_command_line.hpp"
#include "family.hpp"

template TPX_TRAINER_COMMAND_LINE(gpt::family);

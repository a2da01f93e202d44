// tpx-gpt: the GPT example (README.md beside it) trained on the host backend, one thread per
// rank, by the example trainers' shared loop and command line (examples/trainer/cli.hpp): the
// flags, progress lines, log and checkpoints are tpx-train's, with the transformer's size flags.
//
//   tpx-gpt --mesh 2x2 --steps 300 --log gpt.jsonl
#include "../trainer/cli.hpp"
#include "family.hpp"

int main(int argc, char** argv) {
  return trainer::train_main<gpt::family>(argc, argv, "tpx-gpt", "one thread per rank",
                                          trainer::backend{"threads", tpx::host});
}

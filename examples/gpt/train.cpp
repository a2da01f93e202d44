// tpx-gpt: the GPT example (README.md beside it) trained on the host backend, one thread per
// rank or, started by mpirun, one MPI process per rank (examples/trainer/launch_main.hpp), by the
// example trainers' shared loop and command line (examples/trainer/cli.hpp): the flags, progress
// lines, log and checkpoints are tpx-train's, with the transformer's size flags.
//
//   tpx-gpt --mesh 2x2 --steps 300 --log gpt.jsonl
#include "../trainer/launch_main.hpp"
// After launch_main.hpp, whose launchers training.hpp's qualified tpx::spmd calls must see:
#include "host_ranks.hpp"  // the loop of a rank, compiled in host_rank_*.cpp

int main(int argc, char** argv) { return trainer::launch_main<gpt::family>(argc, argv, "tpx-gpt"); }

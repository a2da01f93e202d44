// tpx-train: the example FSDP + TP trainer on the host backend, one thread per rank, or one MPI
// process per rank when started by mpirun (launch_main.hpp). See README.md beside it; the flags
// are cli.hpp's, shared with tpx-train-cuda (train_cuda.cu) and tpx-gpt. With --pipeline P the
// model is cut into P pipeline stages (pipelined_family.hpp: a mesh of P x X x Y ranks).
//
//   tpx-train --mesh 2x2 --steps 300 --log train.jsonl
//   mpirun -np 4 tpx-train --mesh 2x2 --steps 300 --log train.jsonl
//   tpx-train --pipeline 2 --microbatches 4 --schedule 1f1b --mesh 2x1
#include <string_view>

#include "launch_main.hpp"
// After launch_main.hpp, whose launchers training.hpp's qualified tpx::spmd calls must see:
#include "host_ranks.hpp"  // the loop of a rank, compiled in host_rank_*.cpp

namespace {

// Whether the command line names --pipeline (as `--pipeline P` or `--pipeline=P`).
bool asks_for_pipeline(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--pipeline" || arg.starts_with("--pipeline=")) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (asks_for_pipeline(argc, argv))
    return trainer::launch_main<trainer::pipelined_mlp>(argc, argv, "tpx-train");
  return trainer::launch_main<trainer::mlp>(argc, argv, "tpx-train");
}

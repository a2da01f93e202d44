// tpx-train: the example FSDP + TP trainer on the host backend, one thread per rank, or one MPI
// process per rank when started by mpirun (launch_main.hpp). See README.md beside it; the flags
// are cli.hpp's, shared with tpx-train-cuda (train_cuda.cu) and tpx-gpt. With --pipeline P the
// model is cut into P pipeline stages (pipelined_family.hpp: a mesh of P x X x Y ranks).
//
//   tpx-train --mesh 2x2 --steps 300 --log train.jsonl
//   mpirun -np 4 tpx-train --mesh 2x2 --steps 300 --log train.jsonl
//   tpx-train --pipeline 2 --microbatches 4 --schedule 1f1b --mesh 2x1
#include "launch_main.hpp"
#include "mlp_or_pipelined.hpp"
// After launch_main.hpp, whose launchers training.hpp's qualified tpx::spmd calls must see:
#include "host_ranks.hpp"  // the loop of a rank, compiled in host_rank_*.cpp

int main(int argc, char** argv) {
  return trainer::with_mlp_or_pipelined(argc, argv, "tpx-train", [&]<class Family>() {
    return trainer::launch_main<Family>(argc, argv, "tpx-train");
  });
}

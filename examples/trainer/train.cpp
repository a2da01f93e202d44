// tpx-train: the example FSDP + TP trainer on the host backend, one thread per rank. See
// README.md beside it; the flags are cli.hpp's, shared with tpx-train-cuda (train_cuda.cu).
//
//   tpx-train --mesh 2x2 --steps 300 --log train.jsonl
#include "cli.hpp"

int main(int argc, char** argv) {
  return trainer::train_main<trainer::mlp>(argc, argv, "tpx-train", "one thread per rank",
                             trainer::backend{"threads", tpx::host});
}

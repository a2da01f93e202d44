// tpx-train: the example FSDP + TP trainer on the host backend, one thread per rank, or one MPI
// process per rank when started by mpirun (launch_main.hpp). See README.md beside it; the flags
// are cli.hpp's, shared with tpx-train-cuda (train_cuda.cu) and tpx-gpt. With --pipeline P the
// model is cut into P pipeline stages (pipelined_family.hpp: a mesh of P x X x Y ranks).
//
//   tpx-train --mesh 2x2 --steps 300 --log train.jsonl
//   mpirun -np 4 tpx-train --mesh 2x2 --steps 300 --log train.jsonl
//   tpx-train --pipeline 2 --microbatches 4 --schedule 1f1b --mesh 2x1
#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "launch_main.hpp"
// After launch_main.hpp, whose launchers training.hpp's qualified tpx::spmd calls must see:
#include "host_ranks.hpp"  // the loop of a rank, compiled in host_rank_*.cpp

namespace {

// Whether argv names the flag `name` (as `--name V`, `--name=V` or a switch).
bool names_flag(int argc, char** argv, std::string_view name) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == name || (arg.starts_with(name) && arg.substr(name.size()).starts_with('=')))
      return true;
  }
  return false;
}

// A flag that only the pipelined model has ("--schedule") named in argv, or "".
std::string pipeline_flag_in(int argc, char** argv) {
  trainer::pipelined_mlp::config staged;
  trainer::config plain;
  std::vector<std::string> own;
  for (const auto& f : trainer::pipelined_mlp::size_flags(staged)) own.push_back(f.name);
  for (const auto& f : trainer::pipelined_mlp::switch_flags(staged)) own.push_back(f.name);
  for (const auto& f : trainer::pipelined_mlp::choice_flags(staged)) own.push_back(f.name);
  for (const auto& f : trainer::mlp::size_flags(plain)) std::erase(own, std::string(f.name));
  for (const std::string& name : own)
    if (names_flag(argc, argv, name)) return name;
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (names_flag(argc, argv, "--pipeline"))
    return trainer::launch_main<trainer::pipelined_mlp>(argc, argv, "tpx-train");
  if (const std::string flag = pipeline_flag_in(argc, argv); !flag.empty()) {
    std::fprintf(stderr,
                 "tpx-train: %s is a flag of --pipeline P (the model cut into P pipeline "
                 "stages): add --pipeline, or drop %s\n",
                 flag.c_str(), flag.c_str());
    return 1;
  }
  return trainer::launch_main<trainer::mlp>(argc, argv, "tpx-train");
}

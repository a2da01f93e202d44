// Which model family a command line of tpx-train or tpx-train-cuda names: with --pipeline P the
// MLP cut into P pipeline stages (pipelined_family.hpp), else the MLP (mlp_family.hpp). A flag
// only the pipelined model has (--microbatches, --schedule, --fsdp-per-pass) without
// --pipeline is refused, naming it, rather than ignored.
//
//   return trainer::with_mlp_or_pipelined(argc, argv, "tpx-train", [&]<class Family>() {
//     return trainer::launch_main<Family>(argc, argv, "tpx-train");
//   });
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "mlp_family.hpp"
#include "pipelined_family.hpp"

namespace trainer {

namespace detail {

// Whether argv names the flag `name` (as `--name V`, `--name=V` or a switch).
inline bool names_flag(int argc, char** argv, std::string_view name) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == name || (arg.starts_with(name) && arg.substr(name.size()).starts_with('=')))
      return true;
  }
  return false;
}

// A flag that only the pipelined model has named in argv, or "".
inline std::string pipeline_flag_in(int argc, char** argv) {
  pipelined_mlp::config staged;
  config plain;
  std::vector<std::string> own;
  for (const auto& f : pipelined_mlp::size_flags(staged)) own.push_back(f.name);
  for (const auto& f : pipelined_mlp::switch_flags(staged)) own.push_back(f.name);
  for (const auto& f : pipelined_mlp::choice_flags(staged)) own.push_back(f.name);
  for (const auto& f : mlp::size_flags(plain)) std::erase(own, std::string(f.name));
  for (const std::string& name : own)
    if (names_flag(argc, argv, name)) return name;
  return "";
}

}  // namespace detail

// main.template operator()<Family>() for the family argv names; 1 with the sentence for the user
// on standard error for a pipeline's flag without --pipeline.
template <class Main>
int with_mlp_or_pipelined(int argc, char** argv, const char* program, Main&& main) {
  if (detail::names_flag(argc, argv, "--pipeline"))
    return main.template operator()<pipelined_mlp>();
  if (const std::string flag = detail::pipeline_flag_in(argc, argv); !flag.empty()) {
    std::fprintf(stderr,
                 "%s: %s is a flag of --pipeline P (the model cut into P pipeline stages): add "
                 "--pipeline, or drop %s\n",
                 program, flag.c_str(), flag.c_str());
    return 1;
  }
  return main.template operator()<mlp>();
}

}  // namespace trainer

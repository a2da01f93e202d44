// tpx-gpt --generate (and tpx-gpt-cuda's, on the host): the model of a checkpoint read onto one
// host rank, and the text it writes printed as it comes (generation.hpp). Compiled once for both
// programs (the object library tpx_gpt_generate, examples/trainer_ranks.cmake), as their command
// line is.
#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <tpx/io/checkpoint.hpp>
#include <tpx/tpx.hpp>

#include "family.hpp"
#include "generation.hpp"

namespace gpt {

generated generate_from_checkpoint(const std::string& dir, std::string_view prompt, int count,
                                   const sampling_options& s,
                                   const std::function<void(char)>& on_byte) {
  require_prompt(prompt);
  tpx::io::checkpoint_reader in = tpx::io::checkpoint_reader::open_newest_valid(dir, std::cerr);
  generated out{in.step(), family::config_of(trainer::recorded_shape<family>(in.state()), dir), {}};
  tpx::spmd(tpx::host, mesh{1, 1, 1}, [&](auto& rank) {
    model_tensors<tpx::host_space> params(rank, out.model);
    params.for_each([&](const std::string& name, auto& t) { in.load("param." + name, t); });
    out.text = generate(rank, params, out.model, prompt, count, s, on_byte);
  });
  return out;
}

int family::generate_main(const char* program, const trainer::command_line<family>& c) {
  const trainer::generation_request& g = c.generate;
  try {
    const auto start = std::chrono::steady_clock::now();
    bool started = false;
    const generated out = generate_from_checkpoint(
        c.training.ckpt_dir, g.prompt, g.bytes, {g.temperature, g.seed}, [&](char byte) {
          if (!started) std::fputs(g.prompt.c_str(), stdout);
          started = true;
          std::fputc(byte, stdout);
          std::fflush(stdout);  // each byte as it comes, through a pipe too
        });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr,
                 "%s: %d bytes in %.1f s by the model of step %lld in %s (%s), "
                 "temperature %g, sample seed %llu\n",
                 program, g.bytes, seconds, static_cast<long long>(out.step),
                 c.training.ckpt_dir.c_str(), describe(out.model).c_str(), g.temperature,
                 static_cast<unsigned long long>(g.seed));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
  return 0;
}

}  // namespace gpt

// The example trainers started by a launcher as users start them, against the run of their own
// threads: for the tests that run mpirun (mpi_program_test.cpp) and srun and sbatch
// (slurm_program_test.cpp) themselves. check_same_losses(launch, program, flags, steps, dir)
// runs `program --mesh 2x2` alone and as `launch program`, and checks that both log the same
// losses, step for step, as the log prints them (mpi_trainer_test compares the bits), and that
// the header and the last progress line come once: rank 0 prints, the others' stdout is dropped.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/run_command.hpp"

// The "loss" field of every line of a JSONL log, as written.
inline std::vector<std::string> logged_losses(const std::filesystem::path& log) {
  std::ifstream in(log);
  std::vector<std::string> losses;
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("\"loss\": ");
    REQUIRE(at != std::string::npos);
    const auto begin = at + 8;
    losses.push_back(line.substr(begin, line.find(',', begin) - begin));
  }
  return losses;
}

// How many times `part` occurs in `text`.
inline std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// "step     4 |": the progress line of step `step`, as the trainers print it.
inline std::string progress_line(int step) {
  const std::string number = std::to_string(step);
  return "step " + std::string(number.size() < 5 ? 5 - number.size() : 0, ' ') + number + " |";
}

// The flags of `program --mesh 2x2` for `steps` steps, logging every step to `log`.
inline std::string mesh_2x2_run(const std::string& program, const std::string& flags, int steps,
                                const std::filesystem::path& log) {
  return program + " --mesh 2x2 --steps " + std::to_string(steps) +
         " --peak-gflops 1 --log-every 1 " + flags + " --log " + log.string();
}

inline void check_same_losses(const std::string& launch, const std::string& program,
                              const std::string& flags, int steps,
                              const std::filesystem::path& dir) {
  const command_result threads = run_command(mesh_2x2_run(program, flags, steps, dir / "t.jsonl"));
  const command_result launched =
      run_command(launch + " " + mesh_2x2_run(program, flags, steps, dir / "launched.jsonl"));
  INFO(program, "\nthreads:\n", threads.output, "\n", launch, ":\n", launched.output);
  REQUIRE(threads.status == 0);
  REQUIRE(launched.status == 0);
  const std::string header = std::filesystem::path(program).filename().string() + ": mesh 2x2";
  CHECK(count(threads.output, header) == 1);
  CHECK(count(launched.output, header) == 1);
  CHECK(count(launched.output, progress_line(steps - 1)) == 1);
  const std::vector<std::string> expected = logged_losses(dir / "t.jsonl");
  CHECK(expected.size() == static_cast<std::size_t>(steps));
  CHECK(logged_losses(dir / "launched.jsonl") == expected);
}

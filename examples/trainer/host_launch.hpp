// Whether a host trainer (tpx-train, tpx-gpt) can run under the launch that started it: its
// ranks are threads of one process (started alone) or MPI processes (under mpirun or srun
// --mpi=pmix, in a build with MPI; launch_main.hpp). Started by torchrun or srun as one of several
// processes, each process would train every rank of the mesh on its own threads, N copies of one
// run writing one log, so that is refused with the way out; a launch of one process is the program
// alone, and so is a batch script that runs the program directly (process_launcher.hpp: no job
// step, so not srun). Host-only and read through a lookup, so that
// tests/trainer/host_launch_test.cpp checks every case.
#pragma once

#include <charconv>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tpx/launch/process_launcher.hpp>

namespace trainer {

// Throws std::invalid_argument with the sentence for the user when `program`, a host trainer,
// was started by torchrun or srun in a launch of more than one process (its size read through
// `get`, as std::getenv reads it).
inline void check_host_launch(const tpx::process_launcher& started, const char* program,
                              const std::function<const char*(const char*)>& get) {
  if (started.kind != tpx::process_launcher::torchrun &&
      started.kind != tpx::process_launcher::srun)
    return;
  const char* variable = tpx::world_size_variable(started.kind, get);
  const char* world_size = get(variable);
  const std::string_view size = world_size ? world_size : "";
  int processes = 0;
  const auto [end, error] = std::from_chars(size.data(), size.data() + size.size(), processes);
  if (error == std::errc{} && end == size.data() + size.size() && processes == 1) return;
  std::string how_many = variable;  // appended, not `"=" + std::string(...)`: GCC 12 -O3 -Wrestrict
  how_many += size.empty() ? std::string_view(" is not set") : std::string_view("=");
  how_many += size;
  throw std::invalid_argument(
      "started by " + started.describe() + " as one of several processes (" + how_many +
      "), each of which would train every rank of the mesh on its own threads. " + program +
      "'s ranks are the threads of one process (start it alone: --mesh 2x2 runs 4 threads) or "
      "MPI processes (mpirun or srun --mpi=pmix, in a build with MPI); " +
      program + "-cuda runs one process per GPU under torchrun or srun");
}

}  // namespace trainer

// Whether a host trainer (tpx-train, tpx-gpt) can run under the launch that started it: its
// ranks are threads of one process (started alone) or MPI processes (under mpirun, in a build
// with MPI; launch_main.hpp). Started by torchrun as one of several processes, each process
// would train every rank of the mesh on its own threads, N copies of one run writing one log, so
// that is refused with the way out; a launch of one process is the program alone. srun is not
// judged: its variables (SLURM_PROCID, SLURM_NTASKS) are also those of a batch script that runs
// the program directly on an allocation of several tasks, which must go on. Host-only and read
// through a lookup, so that tests/trainer/host_launch_test.cpp checks every case.
#pragma once

#include <charconv>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tpx/launch/process_launcher.hpp>

namespace trainer {

// Throws std::invalid_argument with the sentence for the user when `program`, a host trainer,
// was started by torchrun in a launch of more than one process (WORLD_SIZE read through `get`,
// as std::getenv reads it).
inline void check_host_launch(const tpx::process_launcher& started, const char* program,
                              const std::function<const char*(const char*)>& get) {
  if (started.kind != tpx::process_launcher::torchrun) return;
  const char* world_size = get("WORLD_SIZE");
  const std::string_view size = world_size ? world_size : "";
  int processes = 0;
  const auto [end, error] = std::from_chars(size.data(), size.data() + size.size(), processes);
  if (error == std::errc{} && end == size.data() + size.size() && processes == 1) return;
  const std::string how_many =
      size.empty() ? "WORLD_SIZE is not set" : "WORLD_SIZE=" + std::string(size);
  throw std::invalid_argument(
      "started by " + started.describe() + " as one of several processes (" + how_many +
      "), each of which would train every rank of the mesh on its own threads. " + program +
      "'s ranks are the threads of one process (start it alone: --mesh 2x2 runs 4 threads) or "
      "MPI processes (mpirun, in a build with MPI); " +
      program + "-cuda runs one process per GPU under torchrun");
}

}  // namespace trainer

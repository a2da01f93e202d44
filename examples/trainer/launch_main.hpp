// The main of the host example trainers, tpx-train and tpx-gpt: one program, any launch
// (issue 10). Started alone, the ranks are threads of the process (tpx::host). Started by an MPI
// launcher (tpx::started_by_mpi(): `mpirun -np 4 tpx-train --mesh 2x2`), each process is one
// rank (tpx::mpi): the flags, progress lines and log are the same, only world rank 0 prints (the
// others' standard output goes to /dev/null; errors still reach standard error), and the losses
// are the thread backend's bit for bit (tests/mpi/mpi_program_test.cpp). A build without MPI
// (TPX_MPI=OFF; CMake defines TPX_EXAMPLES_MPI when it found MPI) refuses to run under mpirun
// rather than train X*Y separate copies of the model, and so does any build under torchrun in a
// launch of more than one process (host_launch.hpp).
//
// Checkpoints work under MPI as on threads: world rank 0 locks and tidies --ckpt-dir and picks
// the checkpoint --resume continues from, then tells every process (training.hpp's checkpointing,
// through processes_of(tpx::mpi): launch/mpi_processes.hpp); each rank writes its own rank file,
// so the folder must be on a filesystem every process sees.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <tpx/launch/process_launcher.hpp>
#include <tpx/launch/started_by_mpi.hpp>

// Before cli.hpp: its calls tpx::spmd(launcher, ...) are qualified, so they see only the
// overloads declared before them.
#ifdef TPX_EXAMPLES_MPI
#include <tpx/launch/mpi_processes.hpp>
#include <tpx/spmd/spmd_mpi.hpp>
#endif

#include "cli.hpp"
#include "host_launch.hpp"
#include "process_main.hpp"

namespace trainer {

// Threads, or MPI processes when an MPI launcher started the program (see the top).
template <class Family>
int launch_main(int argc, char** argv, const char* program) {
  if (const char* variable = tpx::mpi_launcher_variable()) {
#ifdef TPX_EXAMPLES_MPI
    (void)variable;
    return as_mpi_process(argc, argv, [&](int) {
      return train_main<Family>(argc, argv, program, "one MPI process per rank",
                                backend{"mpi", tpx::mpi});
    });
#else
    std::fprintf(stderr,
                 "%s: started by an MPI launcher (%s is set), but built without MPI (TPX_MPI=OFF): "
                 "every process would train alone. Rebuild where CMake finds MPI, or start it "
                 "without mpirun (its ranks are then threads)\n",
                 program, variable);
    return 2;
#endif
  }
  try {
    check_host_launch(tpx::process_launcher_from(), program,
                      [](const char* name) { return std::getenv(name); });
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  }
  return train_main<Family>(argc, argv, program, "one thread per rank (under mpirun: one process)",
                            backend{"threads", tpx::host});
}

}  // namespace trainer

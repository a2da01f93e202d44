// The processes of a torchrun launch on loopback, as threads of a test (tests/unit/
// tcp_processes_test.cpp, tests/trainer/launched_checkpoint_test.cpp): each thread is given the
// launch environment torchrun would give its rank, all with one rendezvous port that nothing
// listened on before.
#pragma once

#include <functional>
#include <thread>
#include <tpx/launch/launch_environment.hpp>
#include <vector>

#include "free_port.hpp"

// Rank `rank` of a torchrun launch of `world` processes whose rendezvous is on `port` of loopback.
inline tpx::launch_environment torchrun_process(int rank, int world, int port) {
  return {rank, world, rank, "127.0.0.1", port, "a port the test chose", "torchrun"};
}

// Runs body(its environment) on a thread per rank of a launch of `world` processes; returns when
// all have.
inline void on_launched_threads(int world,
                                const std::function<void(const tpx::launch_environment&)>& body) {
  const int port = free_port();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] { body(torchrun_process(r, world, port)); });
  for (std::thread& t : threads) t.join();
}

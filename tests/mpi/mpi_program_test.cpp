// One program, any launch (issue 10): tpx-train, tpx-gpt and tpx-bench-collectives started by
// mpirun exactly as a user starts them, with no MPI twin of any of them
// (examples/trainer/launch_main.hpp, bench/collectives.cpp). This test runs mpirun itself (it is
// not started under mpirun) and checks that
//   - tpx-train on 2x2 and tpx-gpt on 2x2 under `mpirun -np 4` log, step for step, the losses
//     their thread run logs (as the log prints them; mpi_trainer_test compares the bits), and
//     that the progress lines come once, from rank 0;
//   - tpx-bench-collectives under `mpirun -np 2` runs on MPI's communicators, with 0 wrong;
//   - tpx-train and tpx-gpt checkpoint under mpirun: stopped halfway and resumed (--resume), they
//     log the uninterrupted thread run's losses;
//   - a job on a checkpoint folder another writer holds fails on every rank with the holder's pid
//     and a non-zero status, within a minute, and writes nothing.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <tpx/io/directory_lock.hpp>
#include <vector>

#include "../support/run_command.hpp"
#include "launched_trainer_runs.hpp"

namespace {

namespace fs = std::filesystem;

std::string mpirun(int processes) {
  return std::string(TPX_MPIRUN) + " " + std::to_string(processes) + " " + TPX_MPIRUN_FLAGS + " ";
}

fs::path scratch(const std::string& name) { return scratch_folder("tpx-mpi-program", name); }

// A run of `steps` steps under mpirun -np 4, stopped halfway and resumed, logs the losses of the
// uninterrupted thread run, and the resumed job prints its progress once.
void check_resume(const std::string& program, const std::string& flags, int steps) {
  const fs::path dir = scratch(fs::path(program).filename().string() + "-ckpt");
  const std::string common = program + " --mesh 2x2 --peak-gflops 1 --log-every 1 " + flags;
  const std::string checkpointed = common + " --ckpt-dir " + (dir / "ckpt").string();
  const command_result threads = run_command(common + " --steps " + std::to_string(steps) +
                                             " --log " + (dir / "threads.jsonl").string());
  const command_result first =
      run_command(mpirun(4) + checkpointed + " --steps " + std::to_string(steps / 2) + " --log " +
                  (dir / "first.jsonl").string());
  const command_result second =
      run_command(mpirun(4) + checkpointed + " --resume --steps " + std::to_string(steps) +
                  " --log " + (dir / "second.jsonl").string());
  INFO(program, "\nthreads:\n", threads.output, "\nfirst:\n", first.output, "\nresumed:\n",
       second.output);
  REQUIRE(threads.status == 0);
  REQUIRE(first.status == 0);
  REQUIRE(second.status == 0);
  std::vector<std::string> both = logged_losses(dir / "first.jsonl");
  const std::vector<std::string> rest = logged_losses(dir / "second.jsonl");
  both.insert(both.end(), rest.begin(), rest.end());
  const std::vector<std::string> expected = logged_losses(dir / "threads.jsonl");
  CHECK(expected.size() == static_cast<std::size_t>(steps));
  CHECK(both == expected);
  CHECK(count(second.output, fs::path(program).filename().string() + ": mesh 2x2") == 1);
}

}  // namespace

TEST_CASE("tpx-train under mpirun -np 4 logs the thread run's losses") {
  check_same_losses(mpirun(4), TPX_TRAIN, "--batch 16 --d-model 16 --ffn 32 --layers 2", 20,
                    scratch("tpx-train"));
}

TEST_CASE("tpx-gpt under mpirun -np 4 logs the thread run's losses") {
  check_same_losses(mpirun(4), TPX_GPT,
                    "--batch 4 --seq 8 --heads 2 --head-dim 4 --ffn 16 --layers 1", 5,
                    scratch("tpx-gpt"));
}

TEST_CASE("tpx-bench-collectives under mpirun runs on MPI's communicators") {
  const command_result r =
      run_command(mpirun(2) + TPX_BENCH_COLLECTIVES + " -b 1K -e 64K -f 8 -n 2 -w 1");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(count(r.output, "# tpx-bench-collectives: 2 ranks (processes, MPI communicator)") == 1);
  CHECK(count(r.output, "# Out of bounds values : 0 OK") == 1);
}

TEST_CASE("tpx-train and tpx-gpt under mpirun checkpoint and resume with the thread run's losses") {
  check_resume(TPX_TRAIN, "--batch 16 --d-model 16 --ffn 32 --layers 2", 20);
  check_resume(TPX_GPT, "--batch 4 --seq 8 --heads 2 --head-dim 4 --ffn 16 --layers 1", 6);
}

TEST_CASE("a job under mpirun on a folder another writer holds fails on every rank, naming it") {
  const fs::path dir = scratch("locked") / "ckpt";
  const tpx::io::directory_lock held(dir);  // this process is the other writer
  const auto start = std::chrono::steady_clock::now();
  const command_result r =
      run_command(mpirun(4) + TPX_TRAIN + " --mesh 2x2 --steps 2 --ckpt-dir " + dir.string());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(count(r.output, "tpx-train: tpx: " + dir.string() +
                            ": checkpoint folder is in use by another writer (pid " +
                            std::to_string(::getpid()) + ")") == 4);  // one line per rank
  CHECK(seconds < 60);  // every rank fails at once: none waits for a decision that never comes
  CHECK(std::vector<fs::path>(fs::directory_iterator(dir), fs::directory_iterator()) ==
        std::vector<fs::path>{dir / "lock"});  // nothing was written
}

// One program, any launch (issue 10), under a real Slurm: tpx's programs started by srun and
// sbatch as users start them on a cluster, against a private one-node cluster that CTest starts
// for this test (tests/scripts/with_private_slurm.sh, which sets SLURM_CONF), so that Slurm's own
// variables decide, not the tables of fake ones that launch_test and the launch tests use.
//   - `srun --mpi=pmix -n 4` runs tpx-train and tpx-gpt on 2x2 as MPI processes: the losses of
//     their thread run, the progress once;
//   - `srun -n 4` without MPI: every task refuses, saying why and how to start it, and exits 2;
//   - `srun --mpi=pmix -n 3` for a 2x2 mesh: refused on every process, with srun's own command;
//   - a batch script that runs tpx-train directly, without srun, in an allocation of 4 tasks
//     (SLURM_PROCID=0 and SLURM_NTASKS=4, no SLURM_STEP_ID) trains alone on 4 threads, with the
//     thread run's losses, rather than waiting for tasks that never start;
//   - a trainer rank that throws mid-step, and a process that fails before its rank starts, end
//     an `srun --mpi=pmix -n 4` step with their reports (mpi_trainer_failure_test's and
//     mpi_process_failure_test's programs), well before the 2 minutes Slurm gives the step;
//   - the rendezvous of the CUDA trainers' srun launch (launch/tcp_rendezvous.hpp, through
//     tpx-rendezvous-peer) forms under `srun -n 4` in a batch script that sets MASTER_ADDR as
//     launch_environment.hpp says, and is refused in the batch script's own process;
//   - the CUDA trainers' choice of GPU (launch/local_device.hpp, through tpx-local-device-peer)
//     on the cluster's 4 stand-in GPUs: under `srun -n 4 --gpus-per-task=1` (README.md's
//     command) task L is bound to GPU L alone and drives it, and under `--gpus-per-node=4`
//     every task sees all 4 and drives the one of its local rank.
#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../support/free_port.hpp"
#include "../support/run_command.hpp"
#include "launched_trainer_runs.hpp"

namespace {

namespace fs = std::filesystem;

// Each step and job may run 2 minutes (Slurm's --time): a hang fails the test, not CI.
const std::string srun = "srun --time=2 ";

const std::string train_flags = "--batch 16 --d-model 16 --ffn 32 --layers 2";

// Every case's first call: the cluster must be the private one (run by CTest, or by hand as
// `bash tests/scripts/with_private_slurm.sh build/default/tests/mpi/slurm_program_test`).
fs::path scratch(const std::string& name) {
  INFO("SLURM_CONF is not set: run this test through tests/scripts/with_private_slurm.sh");
  REQUIRE(std::getenv("SLURM_CONF") != nullptr);
  return scratch_folder("tpx-slurm-program", name);
}

// Submits `script` (its lines after #!/bin/bash) as a batch job of `tasks` tasks, waits for its
// end and returns its status and what it printed (sbatch itself says nothing but errors).
command_result batch_job(const fs::path& dir, int tasks, const std::string& script) {
  const fs::path file = dir / "job.sh";
  std::ofstream(file) << "#!/bin/bash\n" << script << "\n";
  const fs::path out = dir / "job.out";
  command_result r = run_command("sbatch --quiet --wait --time=2 -n " + std::to_string(tasks) +
                                 " -o " + out.string() + " " + file.string());
  std::ifstream in(out);
  r.output += std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

std::size_t lines_of(const std::string& text) { return count(text, "\n"); }

}  // namespace

TEST_CASE("tpx-train and tpx-gpt under srun --mpi=pmix -n 4 log the thread run's losses") {
  check_same_losses(srun + "--mpi=pmix -n 4", TPX_TRAIN, train_flags, 12, scratch("tpx-train"));
  check_same_losses(srun + "--mpi=pmix -n 4", TPX_GPT,
                    "--batch 4 --seq 8 --heads 2 --head-dim 4 --ffn 16 --layers 1", 4,
                    scratch("tpx-gpt"));
}

TEST_CASE("tpx-train under srun -n 4 without MPI: every task refuses with the way to start it") {
  const fs::path dir = scratch("no-mpi");
  const command_result r =
      run_command(srun + "-n 4 " + mesh_2x2_run(TPX_TRAIN, train_flags, 2, dir / "log.jsonl"));
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(count(r.output,
              "tpx-train: started by srun (SLURM_STEP_ID is set) as one of several "
              "processes (SLURM_STEP_NUM_TASKS=4), each of which would train every "
              "rank of the mesh on its own threads") == 4);
  CHECK(count(r.output, "srun --mpi=pmix") == 4);
  CHECK(count(r.output, "Exited with exit code 2") == 1);  // srun's report of the tasks
  CHECK_FALSE(fs::exists(dir / "log.jsonl"));
}

TEST_CASE("tpx-train under srun --mpi=pmix -n 3 for a 2x2 mesh: refused, with srun's command") {
  const fs::path dir = scratch("three");
  const command_result r = run_command(srun + "--mpi=pmix -n 3 " +
                                       mesh_2x2_run(TPX_TRAIN, train_flags, 2, dir / "log.jsonl"));
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(count(r.output, "tpx: the mesh (X=2, Y=2) has 4 ranks but MPI started 3 processes") == 3);
  CHECK(count(r.output, "start one process per rank: srun -n 4 --mpi=pmix") == 3);
  CHECK(count(r.output, progress_line(0)) == 0);
}

TEST_CASE("a batch script that runs tpx-train without srun trains alone on its own threads") {
  const fs::path dir = scratch("batch");
  const int steps = 6;
  const command_result threads =
      run_command(mesh_2x2_run(TPX_TRAIN, train_flags, steps, dir / "threads.jsonl"));
  const command_result job =
      batch_job(dir, 4,
                "echo \"SLURM_PROCID=$SLURM_PROCID SLURM_NTASKS=$SLURM_NTASKS "
                "SLURM_STEP_ID=${SLURM_STEP_ID-unset}\"\n" +
                    mesh_2x2_run(TPX_TRAIN, train_flags, steps, dir / "batch.jsonl"));
  INFO("threads:\n", threads.output, "\nbatch job:\n", job.output);
  REQUIRE(threads.status == 0);
  REQUIRE(job.status == 0);
  // what makes this case: a batch script's own variables, as Slurm sets them
  CHECK(count(job.output, "SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_STEP_ID=unset") == 1);
  CHECK(count(job.output, "tpx-train: mesh 2x2") == 1);
  const std::vector<std::string> expected = logged_losses(dir / "threads.jsonl");
  CHECK(expected.size() == static_cast<std::size_t>(steps));
  CHECK(logged_losses(dir / "batch.jsonl") == expected);
}

TEST_CASE("a failing rank or process ends an srun --mpi=pmix step with its report") {
  struct failure {
    const char* program;
    std::string report;
  };
  for (const failure& f :
       {failure{TPX_TRAINER_FAILURE, "failed: injected fault at step "},  // tpx: rank R (..)
        failure{TPX_PROCESS_FAILURE,
                "MPI process 1 failed while other processes of the job were "
                "still running (waited 10 s for them): ending the job"}}) {
    const auto start = std::chrono::steady_clock::now();
    const command_result r = run_command(srun + "--mpi=pmix -n 4 " + f.program);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(f.program, "\n", r.output);
    CHECK(r.status != 0);
    CHECK(count(r.output, f.report) == 1);
    CHECK(seconds < 60);  // ended by MPI_Abort, not by Slurm's limit
  }
}

TEST_CASE("the CUDA trainers' rendezvous forms under srun -n 4, and not in a batch script") {
  const fs::path dir = scratch("rendezvous");
  const std::string port = std::to_string(free_port());
  const command_result step = batch_job(
      dir, 4,
      "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
      "export MASTER_PORT=" +
          port + "\n" + srun + TPX_RENDEZVOUS_PEER + " slurm-test 60000");
  INFO(step.output);
  CHECK(step.status == 0);
  // Each task prints the payload it ends with, rank 0's 128 bytes: four equal lines.
  REQUIRE(lines_of(step.output) == 4);
  const std::string first = step.output.substr(0, step.output.find('\n') + 1);
  CHECK(first.size() == 2 * 128 + 1);
  CHECK(count(step.output, first) == 4);

  const command_result alone = batch_job(dir, 4,
                                         "export MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + "\n" +
                                             TPX_RENDEZVOUS_PEER + " slurm-test 60000");
  INFO(alone.output);
  CHECK(alone.status != 0);
  CHECK(count(alone.output,
              "tpx: not started by a multi-process launcher: SLURM_PROCID is set, "
              "but neither SLURM_STEP_ID nor SLURM_STEPID: a SLURM batch script's "
              "own process, not a task of srun (start the program with srun)") == 1);
}

TEST_CASE("the CUDA trainers drive the GPU Slurm binds to each task, or their local rank's") {
  scratch("gpus");
  const std::string peer = std::string("MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ") + srun + "-n 4 ";
  const command_result per_task = run_command(peer + "--gpus-per-task=1 " + TPX_LOCAL_DEVICE_PEER);
  const command_result per_node = run_command(peer + "--gpus-per-node=4 " + TPX_LOCAL_DEVICE_PEER);
  INFO("--gpus-per-task=1:\n", per_task.output, "\n--gpus-per-node=4:\n", per_node.output);
  REQUIRE(per_task.status == 0);
  REQUIRE(per_node.status == 0);
  for (int local = 0; local < 4; ++local) {
    const std::string rank = "local rank " + std::to_string(local);
    // per_task binding gives the node's GPUs to its tasks in order (srun's manual)
    CHECK(count(per_task.output,
                rank + ": CUDA_VISIBLE_DEVICES=" + std::to_string(local) + ", device 0\n") == 1);
    CHECK(count(per_node.output, rank + ": CUDA_VISIBLE_DEVICES=0,1,2,3, device " +
                                     std::to_string(local) + "\n") == 1);
  }
}

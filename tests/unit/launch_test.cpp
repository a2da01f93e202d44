// How a program learns how it was started, and how one of its processes decides for all
// (issue 10, "one program, any launch"):
//  - process_launcher_from names the launcher from fake environments: an MPI launcher's
//    variables win over srun's (srun --mpi=pmix sets both), torchrun's over srun's, none: alone;
//    srun's are a job step's (SLURM_STEP_ID, or older Slurm's SLURM_STEPID), so a batch script's
//    SLURM_PROCID and SLURM_NTASKS without one are alone too; world_size_variable names the
//    variable that counts the processes (the step's count before the allocation's);
//    mpi_launch_command says how to start n processes: srun's flags in an srun step, else mpirun's;
//  - local_device picks a launched rank's GPU: its local rank's among the node's, or the one GPU
//    a launcher bound to it (srun --gpus-per-task=1), else none;
//  - first_process_decides, on a group whose processes are played in turn by this thread, runs
//    the decision on the first process only and gives every process its answer, whatever bytes it
//    holds; when the decision throws, the first process rethrows its own exception and every
//    other one throws with its message, so none is left waiting; this_process_only is the group
//    of one every thread launcher has.
// The MPI group (launch/mpi_processes.hpp) is tested under mpirun by tests/mpi.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <tpx/launch/local_device.hpp>
#include <tpx/launch/process_group.hpp>
#include <tpx/launch/process_launcher.hpp>
#include <tpx/launch/started_by_mpi.hpp>
#include <utility>

#include "../support/environment_table.hpp"
#include "../support/message_of.hpp"

namespace {

tpx::process_launcher launcher_in(const environment_table& env) {
  return tpx::process_launcher_from(lookup_in(env));
}

// Process `process` of `processes`, played in turn by this thread: the first's broadcast goes
// onto the wire, the others' returns what is there.
struct played_process {
  int process;
  int processes;
  std::string* wire;
  int rank() const { return process; }
  int size() const { return processes; }
  std::string broadcast_from_first(std::string text) const {
    if (process == 0) *wire = std::move(text);
    return *wire;
  }
};
static_assert(tpx::ProcessGroup<played_process>);
static_assert(tpx::ProcessGroup<tpx::this_process_only>);

}  // namespace

TEST_CASE("process_launcher_from names the launcher that started the process") {
  CHECK(launcher_in({}).kind == tpx::process_launcher::alone);
  CHECK(launcher_in({}).describe() == "no launcher");
  const tpx::process_launcher open_mpi = launcher_in({{"OMPI_COMM_WORLD_SIZE", "4"}});
  CHECK(open_mpi.kind == tpx::process_launcher::mpi);
  CHECK(open_mpi.describe() == "an MPI launcher (OMPI_COMM_WORLD_SIZE is set)");
  const tpx::process_launcher pmix = launcher_in({{"PMIX_RANK", "1"}, {"SLURM_PROCID", "1"}});
  CHECK(pmix.kind == tpx::process_launcher::mpi);  // srun --mpi=pmix: an MPI job
  CHECK(pmix.describe() == "an MPI launcher (PMIX_RANK is set)");
  const tpx::process_launcher torchrun = launcher_in({{"RANK", "0"}, {"SLURM_PROCID", "3"}});
  CHECK(torchrun.kind == tpx::process_launcher::torchrun);  // torchrun inside an allocation
  CHECK(torchrun.describe() == "torchrun (RANK is set)");
  const tpx::process_launcher srun =
      launcher_in({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_ID", "0"}});
  CHECK(srun.kind == tpx::process_launcher::srun);
  CHECK(srun.describe() == "srun (SLURM_STEP_ID is set)");
  const tpx::process_launcher old_srun =
      launcher_in({{"SLURM_PROCID", "2"}, {"SLURM_STEPID", "3"}});
  CHECK(old_srun.kind == tpx::process_launcher::srun);
  CHECK(old_srun.describe() == "srun (SLURM_STEPID is set)");
}

TEST_CASE("a batch script's SLURM variables without a job step are no launch: alone") {
  // What sbatch gives the script on the allocation's first node (4 tasks on 4 nodes).
  const environment_table batch_script{{"SLURM_JOB_ID", "200505"}, {"SLURM_PROCID", "0"},
                                       {"SLURM_NTASKS", "4"},      {"SLURM_LOCALID", "0"},
                                       {"SLURM_NODEID", "0"},      {"SLURM_NNODES", "4"}};
  CHECK(launcher_in(batch_script).kind == tpx::process_launcher::alone);
  CHECK(launcher_in(batch_script).describe() == "no launcher");
}

TEST_CASE("world_size_variable: WORLD_SIZE, or the srun step's count before the allocation's") {
  const environment_table step{{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_NTASKS", "8"}};
  CHECK(std::string(tpx::world_size_variable(tpx::process_launcher::torchrun, lookup_in(step))) ==
        "WORLD_SIZE");
  CHECK(std::string(tpx::world_size_variable(tpx::process_launcher::srun, lookup_in(step))) ==
        "SLURM_STEP_NUM_TASKS");
  CHECK(std::string(tpx::world_size_variable(
            tpx::process_launcher::srun, lookup_in({{"SLURM_NTASKS", "8"}}))) == "SLURM_NTASKS");
}

TEST_CASE("mpi_launch_command: srun's flags inside an srun step, mpirun's elsewhere") {
  CHECK(tpx::mpi_launch_command(4, lookup_in({})) == "mpirun -np 4");
  CHECK(tpx::mpi_launch_command(4, lookup_in({{"OMPI_COMM_WORLD_SIZE", "3"}})) == "mpirun -np 4");
  // sbatch's own process under mpirun: SLURM_PROCID without a job step
  CHECK(tpx::mpi_launch_command(4, lookup_in({{"OMPI_COMM_WORLD_SIZE", "3"},
                                              {"SLURM_PROCID", "0"}})) == "mpirun -np 4");
  const environment_table pmix{{"PMIX_RANK", "1"}, {"SLURM_PROCID", "1"}, {"SLURM_STEP_ID", "0"}};
  CHECK(tpx::mpi_launch_command(8, lookup_in(pmix)) == "srun -n 8 --mpi=pmix");
  const environment_table pmi2{{"PMI_RANK", "1"}, {"SLURM_PROCID", "1"}, {"SLURM_STEPID", "2"}};
  CHECK(tpx::mpi_launch_command(2, lookup_in(pmi2)) == "srun -n 2 --mpi=pmi2");
}

TEST_CASE("local_device: the local rank's GPU, or the one GPU the launcher gave the process") {
  // torchrun, or srun --gpus-per-node=8 (CUDA_VISIBLE_DEVICES=0,...,7 for every task)
  for (int local = 0; local < 8; ++local) {
    CHECK(tpx::local_device(local, 8, nullptr) == local);
    CHECK(tpx::local_device(local, 8, "0,1,2,3,4,5,6,7") == local);
  }
  // srun --gpus-per-task=1: task L sees CUDA_VISIBLE_DEVICES=L, which the runtime calls device 0
  for (const char* own : {"0", "3", "7", "GPU-5a1c"}) CHECK(tpx::local_device(3, 1, own) == 0);
  // more ranks than GPUs, none of them given its own
  CHECK(tpx::local_device(1, 1, nullptr) == -1);  // a node of one GPU, two ranks
  CHECK(tpx::local_device(8, 8, nullptr) == -1);  // 9 ranks on 8 GPUs
  CHECK(tpx::local_device(1, 1, "") == -1);       // an empty variable gives no device
  CHECK(tpx::local_device(2, 2, "4,5") == -1);    // two GPUs per task, more tasks than that
  CHECK(tpx::local_device(0, 0, nullptr) == -1);  // no GPU at all
  CHECK(tpx::local_device_shortage(2, "4,5", "") ==
        "and sees 2 CUDA device(s) (CUDA_VISIBLE_DEVICES=4,5): start at most one rank per GPU on "
        "each node, or give each process one GPU of its own (srun --gpus-per-task=1)");
  CHECK(tpx::local_device_shortage(0, nullptr, "cudaErrorNoDevice: no CUDA-capable device") ==
        "and sees 0 CUDA device(s) (cudaErrorNoDevice: no CUDA-capable device): start at most one "
        "rank per GPU on each node, or give each process one GPU of its own (srun "
        "--gpus-per-task=1)");
}

TEST_CASE("first_process_decides: the first process decides, every process gets the answer") {
  std::string wire;
  int decisions = 0;
  const auto decide = [&] {
    ++decisions;
    return std::string("{\"run_id\": \"00ff\", \"first_step\": 20}");
  };
  CHECK(tpx::first_process_decides(played_process{0, 3, &wire}, decide) ==
        "{\"run_id\": \"00ff\", \"first_step\": 20}");
  for (const int rank : {1, 2})
    CHECK(tpx::first_process_decides(played_process{rank, 3, &wire}, decide) ==
          "{\"run_id\": \"00ff\", \"first_step\": 20}");
  CHECK(decisions == 1);

  // An answer is carried as it is, whatever its first byte or its length.
  for (const std::string& answer :
       {std::string("!not an error"), std::string(), std::string(1, '\0')}) {
    CHECK(tpx::first_process_decides(played_process{0, 2, &wire}, [&] { return answer; }) ==
          answer);
    CHECK(tpx::first_process_decides(played_process{1, 2, &wire}, decide) == answer);
  }
  CHECK(decisions == 1);
  CHECK(tpx::first_process_decides(tpx::this_process_only{}, decide) ==
        "{\"run_id\": \"00ff\", \"first_step\": 20}");
  CHECK(decisions == 2);
}

TEST_CASE("first_process_decides: a failed decision fails every process with its message") {
  std::string wire;
  const std::string message = "tpx: /ckpt: checkpoint folder is in use by another writer (pid 42)";
  bool own_exception = false;
  try {
    tpx::first_process_decides(played_process{0, 4, &wire},
                               [&]() -> std::string { throw std::out_of_range(message); });
  } catch (const std::out_of_range& e) {
    own_exception = e.what() == message;
  }
  CHECK(own_exception);  // the first process rethrows its own exception, type and all
  for (const int rank : {1, 2, 3})
    CHECK(message_of([&] {
            tpx::first_process_decides(played_process{rank, 4, &wire},
                                       []() -> std::string { return "never asked"; });
          }) == message);
}

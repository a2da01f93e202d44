// The example trainer's checkpoint folder in a launch of torchrun or srun, whose processes have no
// MPI: they agree through the launch's process group over TCP (launch/tcp_processes.hpp, what
// processes_of(tpx::cuda_launched) gives tpx-train-cuda and tpx-gpt-cuda there). World rank 0
// locks the folder and picks the checkpoint to resume, and every process continues from that
// one, even where its own look at the folder would say another: here the newest checkpoint is
// damaged, so `latest` names a step that rank 0 rejects. A new run on a folder of an earlier
// run fails on every process with rank 0's sentence, and leaves the folder as it was. The
// processes are threads, each with the launch environment torchrun would give it (the CUDA
// launcher itself needs GPUs); the folder's lock is a file lock, so a second holder is refused
// within this process too.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tpx/launch/tcp_processes.hpp>
#include <vector>

#include "../support/launched_threads.hpp"
#include "../support/message_of.hpp"
#include "trainer_test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// This process's place in a torchrun launch, as a launcher with the process group
// tpx::cuda_launched has.
struct launched_process {
  tpx::launch_environment env;
};
tpx::tcp_processes processes_of(const launched_process& p) {
  return tpx::tcp_processes(p.env, 20s);
}

// What each of `world` processes decided about o's folder, or the message of what it threw.
struct decision {
  std::unique_ptr<trainer::checkpointing> ckpt;
  std::string error;
};
std::vector<decision> decide_on_each_process(const trainer::options& o, int world) {
  std::vector<decision> out(static_cast<std::size_t>(world));
  on_launched_threads(world, [&](const tpx::launch_environment& env) {
    const launched_process me{env};
    decision& mine = out[env.rank];
    mine.error = message_of([&] { mine.ckpt = std::make_unique<trainer::checkpointing>(o, me); });
  });
  return out;
}

void damage(const fs::path& file) {
  std::vector<char> bytes(fs::file_size(file));
  std::ifstream(file, std::ios::binary).read(bytes.data(), std::ssize(bytes));
  bytes[bytes.size() / 2] ^= 1;
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), std::ssize(bytes));
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("tpx-launched-ckpt-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("every process of a torchrun launch resumes from the checkpoint rank 0 picked") {
  trainer::options o = trainer_test::small(2, 1);
  o.steps = 6;
  o.save_every = 2;
  o.ckpt_dir = fresh_dir("resume").string();
  trainer_test::losses(o);  // checkpoints of steps 2, 4 and 6
  REQUIRE(tpx::io::latest_step(o.ckpt_dir) == 6);
  damage(tpx::io::step_folder(o.ckpt_dir, 6) / "rank-1.safetensors");
  const std::string run_id = tpx::io::checkpoint_reader(o.ckpt_dir, 4).run_id();

  o.resume = true;
  o.steps = 10;
  const std::vector<decision> decided = decide_on_each_process(o, 4);
  for (int r = 0; r < 4; ++r) {
    INFO("process " << r << ": " << decided[r].error);
    REQUIRE(decided[r].ckpt);
    CHECK(decided[r].ckpt->first_step == 4);
    REQUIRE(decided[r].ckpt->dir);
    CHECK(decided[r].ckpt->dir->run_id() == run_id);
  }
  // One of them holds the folder: a second writer is refused while they run.
  CHECK(message_of([&] {
          tpx::io::checkpoint_directory another(o.ckpt_dir);
        }).find("checkpoint folder is in use by another writer") != std::string::npos);
  fs::remove_all(o.ckpt_dir);
}

TEST_CASE("a new run on an earlier run's folder fails on every process with rank 0's sentence") {
  trainer::options o = trainer_test::small(1, 1);
  o.steps = 2;
  o.ckpt_dir = fresh_dir("earlier").string();
  trainer_test::losses(o);  // the earlier run: a checkpoint of step 2
  const std::vector<decision> decided = decide_on_each_process(o, 3);
  const std::string sentence =
      "trainer: --ckpt-dir " + o.ckpt_dir +
      " holds 1 checkpoint(s) of an earlier run, the newest of step 2: pass --resume to continue "
      "that run, or give an empty folder (a new run would overwrite its steps, and --keep delete "
      "the rest)";
  for (int r = 0; r < 3; ++r) {
    INFO("process " << r);
    CHECK(!decided[r].ckpt);
    CHECK(decided[r].error == sentence);
  }
  CHECK(tpx::io::complete_steps(o.ckpt_dir) == std::vector<std::int64_t>{2});
  fs::remove_all(o.ckpt_dir);
}

// The example trainer's checkpoints under mpirun -np 4 (issue 10), one process per rank: world
// rank 0 holds the folder and decides, every rank writes its own file.
//  - resume: 40 steps in one go, or 20, stop, resume, 20 more, all under MPI on 2x2: the same
//    losses and the same final weights and Adam moments bit for bit, the thread backend's too;
//    the resumed run keeps the run id of the one it continues;
//  - reshard across backends (10 steps, then 10 more): a checkpoint written under MPI on 2x2
//    resumes on threads on 4x1 and 1x1 (its weights bit for bit, the losses within the 1e-5 of
//    another summation order), and one written on threads on 4x1 resumes under MPI on 2x2 with
//    the losses of the thread backend resuming it on 2x2, bit for bit;
//  - retention (--keep 2, a save every 5 steps) leaves exactly the newest two checkpoints, and
//    the temporaries of a killed save are removed before the run;
//  - a pipeline (tpx-train --pipeline 2 on 2x1): its checkpoint under MPI, where the ranks of
//    each stage write other layers, holds the thread run's layers bit for bit, and resumes on
//    threads without stages (1x1) with the losses of the MPI run resuming it, within 1e-5.
// The thread runs, the references, run in world rank 0 alone; the other processes check that
// they received no report. A folder is named by world rank 0's pid, so that every process
// names the same one (the folder must be on a filesystem every process sees).
#include <doctest/doctest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <tpx/spmd/spmd_mpi.hpp>
#include <utility>
#include <vector>

#include "../support/run_command.hpp"
#include "../trainer/trainer_checkpoints.hpp"
#include "mpi_trainer_runs.hpp"

namespace {

namespace fs = std::filesystem;

int world_rank() { return tpx::mpi_world_processes().rank(); }  // starts MPI if need be

// <tmp>/tpx-mpi-checkpoint-<world rank 0's pid>/<name>, the same on every process, empty; world
// rank 0 removes <tmp>/tpx-mpi-checkpoint-<pid> when it exits.
std::string shared_folder(const std::string& name) {
  const tpx::mpi_world_processes processes;
  const fs::path root =
      fs::temp_directory_path() /
      ("tpx-mpi-checkpoint-" + processes.broadcast_from_first(std::to_string(::getpid())));
  const fs::path dir = root / name;
  if (processes.rank() == 0) {
    static const scratch_root removed_at_exit(root);
    fs::remove_all(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir.string();
}

// A copy of a folder made by world rank 0, seen by every process once this returns.
void copy_folder(const std::string& from, const std::string& to) {
  if (world_rank() == 0) fs::copy(from, to, fs::copy_options::recursive);
  MPI_Barrier(MPI_COMM_WORLD);
}

template <class Family, class Launcher>
std::vector<float> losses_on(const trainer::run_options<Family>& o, Launcher launcher) {
  std::vector<float> out;
  trainer::run(
      o, [&](const trainer::step_report& r) { out.push_back(r.loss); }, launcher);
  return out;
}

std::vector<float> part(const std::vector<float>& v, std::size_t from, std::size_t to) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from),
          v.begin() + static_cast<std::ptrdiff_t>(to)};
}

trainer::options small_2x2(const std::string& dir, int steps) {
  trainer::options o = trainer_test::small(2, 2);
  o.ckpt_dir = dir;
  o.steps = steps;
  return o;
}

// small_2x2's model cut into 2 pipeline stages of 2x1 (P x X x Y = 2x2x1), 4 microbatches.
trainer::run_options<trainer::pipelined_mlp> pipelined_2x2x1(const std::string& dir, int steps) {
  auto o = trainer_test::pipelined(2, 2, 1, "1f1b");
  o.ckpt_dir = dir;
  o.steps = steps;
  return o;
}

}  // namespace

TEST_CASE("stop and resume under mpirun continues bit for bit, as on threads") {
  const trainer::options whole = small_2x2(shared_folder("whole"), 40);
  const std::vector<float> uninterrupted = losses_on(whole, tpx::mpi);
  trainer::options split = small_2x2(shared_folder("split"), 20);
  const std::vector<float> first = losses_on(split, tpx::mpi);
  split.steps = 40;
  split.resume = true;
  const std::vector<float> second = losses_on(split, tpx::mpi);
  if (world_rank() != 0) {
    CHECK(uninterrupted.empty());
    CHECK(first.empty());
    CHECK(second.empty());
    return;
  }
  REQUIRE(uninterrupted.size() == 40);
  CHECK(first == part(uninterrupted, 0, 20));
  CHECK(second == part(uninterrupted, 20, 40));
  CHECK(uninterrupted.back() < uninterrupted.front());  // it learns

  trainer::options threads = whole;
  threads.ckpt_dir = (fs::path(whole.ckpt_dir).parent_path() / "threads").string();
  CHECK(losses_on(threads, tpx::host) == uninterrupted);
  const auto weights = trainer_test::load_global(whole, 1, 1, 40);
  CHECK(weights.size() == 3 * (2 + 3 * 4 + 2));
  CHECK(trainer_test::load_global(split, 1, 1, 40) == weights);
  CHECK(trainer_test::load_global(threads, 1, 1, 40) == weights);
  CHECK(tpx::io::checkpoint_reader(split.ckpt_dir, 40).run_id() ==
        tpx::io::checkpoint_reader(split.ckpt_dir, 20).run_id());
}

TEST_CASE("a checkpoint written under mpirun resumes on threads on 4x1 and 1x1") {
  const trainer::options saved = small_2x2(shared_folder("from-mpi"), 10);
  losses_on(saved, tpx::mpi);
  trainer::options continued = saved;
  continued.steps = 20;
  continued.resume = true;
  continued.save_every = 1000;  // only the final step is saved: step 10 stays as it is
  continued.ckpt_dir = shared_folder("from-mpi-2x2");
  copy_folder(saved.ckpt_dir, continued.ckpt_dir);
  const std::vector<float> on_2x2 = losses_on(continued, tpx::mpi);
  if (world_rank() != 0) return;
  REQUIRE(on_2x2.size() == 10);
  const auto weights = trainer_test::load_global(saved, 2, 2, 10);
  for (const auto& mesh : {std::pair{4, 1}, std::pair{1, 1}}) {
    const int x = mesh.first, y = mesh.second;  // not bindings: INFO's lambda captures them
    INFO("resumed on " << x << "x" << y);
    CHECK(trainer_test::load_global(saved, x, y, 10) == weights);
    trainer::options there = continued;
    there.mesh_x = x;
    there.mesh_y = y;
    there.ckpt_dir = saved.ckpt_dir + "-threads-" + std::to_string(x) + "x" + std::to_string(y);
    fs::copy(saved.ckpt_dir, there.ckpt_dir, fs::copy_options::recursive);
    CHECK(trainer_test::worst_relative_difference(losses_on(there, tpx::host), on_2x2) <= 1e-5f);
  }
}

TEST_CASE("a checkpoint written on threads on 4x1 resumes under mpirun on 2x2") {
  trainer::options saved = small_2x2(shared_folder("from-threads"), 10);
  saved.mesh_x = 4;
  saved.mesh_y = 1;
  trainer::options reference = saved;
  reference.mesh_x = 2;
  reference.mesh_y = 2;
  reference.steps = 20;
  reference.resume = true;
  reference.ckpt_dir = saved.ckpt_dir + "-reference";
  if (world_rank() == 0) {
    losses_on(saved, tpx::host);
    fs::copy(saved.ckpt_dir, reference.ckpt_dir, fs::copy_options::recursive);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  trainer::options resumed = reference;
  resumed.ckpt_dir = saved.ckpt_dir;
  const std::vector<float> got = losses_on(resumed, tpx::mpi);
  if (world_rank() != 0) {
    CHECK(got.empty());
    return;
  }
  REQUIRE(got.size() == 10);
  CHECK(got == losses_on(reference, tpx::host));
  CHECK(trainer_test::load_global(resumed, 1, 1, 20) ==
        trainer_test::load_global(reference, 1, 1, 20));
}

TEST_CASE("retention under mpirun keeps the newest --keep checkpoints; temporaries are removed") {
  trainer::options o = small_2x2(shared_folder("keep"), 20);
  o.keep = 2;
  o.save_every = 5;
  const fs::path orphan = fs::path(o.ckpt_dir) / "step-00000020" / "rank-3.safetensors.tmp.4242.0";
  if (world_rank() == 0) {
    fs::create_directories(orphan.parent_path());
    std::ofstream(orphan) << "half a file";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  losses_on(o, tpx::mpi);
  if (world_rank() != 0) return;
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(o.ckpt_dir))
    names.insert(entry.path().filename().string());
  CHECK(names == std::set<std::string>{"latest", "lock", "step-00000015", "step-00000020"});
  std::size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(o.ckpt_dir)) {
    CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
    files += entry.is_regular_file();
  }
  CHECK(files == 2 + 2 * 5);  // latest, lock; per checkpoint 4 rank files and the manifest
}

TEST_CASE("a pipeline's checkpoint under mpirun holds the thread run's layers and resumes without "
          "stages") {
  const auto saved = pipelined_2x2x1(shared_folder("pipelined"), 10);
  losses_on(saved, tpx::mpi);
  auto continued = saved;
  continued.steps = 20;
  continued.resume = true;
  continued.save_every = 1000;  // only the final step is saved: step 10 stays as it is
  continued.ckpt_dir = shared_folder("pipelined-resumed");
  copy_folder(saved.ckpt_dir, continued.ckpt_dir);
  const std::vector<float> on_mpi = losses_on(continued, tpx::mpi);
  if (world_rank() != 0) {
    CHECK(on_mpi.empty());
    return;
  }
  REQUIRE(on_mpi.size() == 10);
  // The same 10 steps on threads write the same layers, which the model without stages reads.
  auto threads = saved;
  threads.ckpt_dir = saved.ckpt_dir + "-threads";
  losses_on(threads, tpx::host);
  const trainer::options layers_of_mpi = small_2x2(saved.ckpt_dir, 10),
                         layers_of_threads = small_2x2(threads.ckpt_dir, 10);
  const auto weights = trainer_test::load_global(layers_of_mpi, 1, 1, 10);
  CHECK(weights.size() == 3 * (2 + 3 * 4 + 2));
  CHECK(trainer_test::load_global(layers_of_threads, 1, 1, 10) == weights);
  // Resumed on threads without stages, on 1x1.
  trainer::options flat = small_2x2(saved.ckpt_dir + "-flat", 20);
  flat.mesh_x = 1;
  flat.mesh_y = 1;
  flat.resume = true;
  flat.save_every = 1000;
  fs::copy(saved.ckpt_dir, flat.ckpt_dir, fs::copy_options::recursive);
  CHECK(trainer_test::worst_relative_difference(losses_on(flat, tpx::host), on_mpi) <= 1e-5f);
}

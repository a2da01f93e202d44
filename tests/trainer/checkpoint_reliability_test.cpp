// The example trainer's checkpoints lose nothing and mix nothing (issue 12): a second trainer on
// one --ckpt-dir, a --ckpt-dir that cannot be created, and a new run (no --resume) in a folder
// that holds an earlier run's checkpoints fail before the first step, leaving them as they were;
// a resumed data_position that is negative or beyond the run's steps is refused (a plain edit
// already by the manifest's checksum); a damaged newest checkpoint gives way to the previous one
// and training continues exactly as from it; --keep K leaves exactly the newest K checkpoints; a
// launcher whose processes have no way to agree on the folder's holder (one of a user's, with no
// tpx::processes_of) gets no checkpoints, with a sentence, rather than a folder every process
// locks.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "trainer_test_support.hpp"

namespace {

using namespace trainer;
namespace fs = std::filesystem;

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = fs::temp_directory_path() /
                   ("tpx-trainer-reliability-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

// The message of what training with o throws ("" if nothing), and how many steps it reported.
struct outcome {
  std::string error;
  std::size_t steps_reported = 0;
};
outcome train(const options& o) {
  outcome out;
  try {
    trainer::run(o, [&](const step_report&) { ++out.steps_reported; });
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Sets the data position of the checkpoint of `step` and re-seals its manifest, as a forger
// would (a plain edit fails the manifest's checksum first).
void set_data_position(const fs::path& dir, std::int64_t step, std::int64_t position, bool reseal) {
  const fs::path path = tpx::io::step_folder(dir, step) / "manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(tpx::io::read_text_file(path));
  manifest["state"]["data_position"] = position;
  if (reseal)
    manifest[tpx::io::manifest_checksum_key] =
        tpx::io::to_hex(tpx::io::manifest_checksum(manifest));
  std::ofstream(path, std::ios::trunc) << manifest.dump(1);
}

}  // namespace

TEST_CASE("a second trainer on one --ckpt-dir is refused before its first step") {
  options o = trainer_test::small(2, 1);
  o.steps = 3;
  o.ckpt_dir = fresh_dir("lock").string();
  {
    const tpx::io::checkpoint_directory first_run(o.ckpt_dir);
    const outcome second = train(o);
    CHECK(contains(second.error, o.ckpt_dir + ": checkpoint folder is in use by another writer"));
    CHECK(contains(second.error, "(pid " + std::to_string(::getpid()) + ")"));
    CHECK(second.steps_reported == 0);
  }
  CHECK(train(o).error.empty());
  fs::remove_all(o.ckpt_dir);
}

TEST_CASE("a --ckpt-dir that cannot be created fails before the first step") {
  const fs::path parent = fresh_dir("unusable");
  fs::create_directories(parent);
  std::ofstream(parent / "a-file") << "not a folder";
  options o = trainer_test::small(2, 1);
  o.ckpt_dir = (parent / "a-file" / "ckpt").string();
  const outcome result = train(o);
  CHECK(contains(result.error, o.ckpt_dir + ": cannot create"));
  CHECK(result.steps_reported == 0);
  fs::remove_all(parent);
}

TEST_CASE("a new run in a folder of an earlier run's checkpoints is refused; --resume continues") {
  options o = trainer_test::small(2, 1);
  o.steps = 4;
  o.save_every = 2;  // checkpoints of steps 2 and 4
  o.ckpt_dir = fresh_dir("earlier-run").string();
  REQUIRE(train(o).error.empty());
  const fs::path manifest = tpx::io::step_folder(o.ckpt_dir, 4) / "manifest.json";
  const std::string saved = tpx::io::read_text_file(manifest);

  o.steps = 6;
  const outcome fresh = train(o);
  CHECK(fresh.error == "trainer: --ckpt-dir " + o.ckpt_dir +
                           " holds 2 checkpoint(s) of an earlier run, the newest of step 4: pass "
                           "--resume to continue that run, or give an empty folder (a new run "
                           "would overwrite its steps, and --keep delete the rest)");
  CHECK(fresh.steps_reported == 0);
  CHECK(tpx::io::read_text_file(manifest) == saved);
  CHECK(tpx::io::latest_step(o.ckpt_dir) == 4);

  o.resume = true;
  const outcome resumed = train(o);
  CHECK(resumed.error.empty());
  CHECK(resumed.steps_reported == 2);  // steps 4 and 5
  CHECK(tpx::io::latest_step(o.ckpt_dir) == 6);
  fs::remove_all(o.ckpt_dir);
}

TEST_CASE("--resume refuses a data_position that is negative or not the checkpoint's step") {
  options o = trainer_test::small(2, 1);
  o.steps = 4;
  o.ckpt_dir = fresh_dir("position").string();
  REQUIRE(train(o).error.empty());
  o.steps = 8;
  o.resume = true;
  set_data_position(o.ckpt_dir, 4, -5, false);
  CHECK(contains(train(o).error, "step-00000004/manifest.json: manifest checksum mismatch"));
  for (const std::int64_t position : {std::int64_t{-5}, std::int64_t{1} << 40}) {
    set_data_position(o.ckpt_dir, 4, position, true);
    const outcome result = train(o);
    CHECK(contains(result.error, "trainer: --resume: the checkpoint of step 4 in " + o.ckpt_dir +
                                     " has data_position " + std::to_string(position) +
                                     ", not its step"));
    CHECK(result.steps_reported == 0);
  }
  fs::remove_all(o.ckpt_dir);
}

TEST_CASE("a damaged newest checkpoint: --resume continues exactly from the previous one") {
  options whole = trainer_test::small(2, 2);
  whole.steps = 20;
  whole.ckpt_dir = fresh_dir("fallback-whole").string();
  const std::vector<float> uninterrupted = trainer_test::losses(whole);

  options broken = whole;
  broken.ckpt_dir = fresh_dir("fallback").string();
  broken.steps = 16;
  broken.save_every = 8;  // checkpoints of steps 8 and 16
  trainer_test::losses(broken);
  const fs::path damaged = tpx::io::step_folder(broken.ckpt_dir, 16) / "rank-3.safetensors";
  std::vector<char> bytes(fs::file_size(damaged));
  std::ifstream(damaged, std::ios::binary).read(bytes.data(), std::ssize(bytes));
  bytes[bytes.size() - 5] ^= 0x01;
  std::ofstream(damaged, std::ios::binary | std::ios::trunc).write(bytes.data(), std::ssize(bytes));

  broken.steps = 20;
  broken.save_every = 0;
  broken.resume = true;
  const std::vector<float> resumed = trainer_test::losses(broken);  // warns on stderr
  REQUIRE(resumed.size() == 12);  // steps 8..19: from the checkpoint of step 8
  CHECK(resumed == std::vector<float>(uninterrupted.begin() + 8, uninterrupted.end()));
  fs::remove_all(whole.ckpt_dir);
  fs::remove_all(broken.ckpt_dir);
}

TEST_CASE("--keep K leaves exactly the newest K checkpoints; --keep 0 all of them") {
  options o = trainer_test::small(2, 1);
  o.steps = 12;
  o.save_every = 2;
  for (const int keep : {2, 0}) {
    CAPTURE(keep);
    o.keep = keep;
    o.ckpt_dir = fresh_dir("keep-" + std::to_string(keep)).string();
    REQUIRE(train(o).error.empty());
    std::vector<std::int64_t> steps = tpx::io::step_folders(o.ckpt_dir);
    std::sort(steps.begin(), steps.end());
    CHECK(steps == (keep == 2 ? std::vector<std::int64_t>{10, 12}
                              : std::vector<std::int64_t>{2, 4, 6, 8, 10, 12}));
    CHECK(tpx::io::latest_step(o.ckpt_dir) == 12);
    fs::remove_all(o.ckpt_dir);
  }
}

TEST_CASE("a launcher without a process group is refused --ckpt-dir before the folder is touched") {
  struct launcher_with_no_process_group {};  // no tpx::processes_of
  options o = trainer_test::small(1, 1);
  o.steps = 2;
  o.ckpt_dir = fresh_dir("no-process-group").string();
  std::string error;
  try {
    const trainer::checkpointing ckpt(o, launcher_with_no_process_group{});
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  CHECK(error ==
        "trainer: --ckpt-dir: checkpoints need the processes of this launch to agree on one "
        "holder of the folder's lock, one run id and one step to resume from before training, "
        "and its launcher gives them no way to (it has no tpx::processes_of: "
        "launch/process_group.hpp): give it one, or run without --ckpt-dir");
  CHECK(!fs::exists(o.ckpt_dir));
  CHECK(train(o).error.empty());  // the thread launcher has a group of one: the same options train
  fs::remove_all(o.ckpt_dir);
}

// Killed while saving, a run loses nothing (issue 12): a trainer that saves after every step is
// SIGKILLed 20 times, at times spread over its saves, each time resuming where the previous one
// was killed. Each resume must start (the lock of a killed run is gone with it, the checkpoint
// `latest` names loads); at the end the temporaries of the killed saves are removed, and a last
// resume continues with the losses of an uninterrupted run, bit for bit (same mesh).
// Each trainer runs in a forked child, forked while this process runs no thread of its own.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "trainer_test_support.hpp"

namespace {

namespace fs = std::filesystem;

bool holds_complete_checkpoint(const fs::path& dir) {
  return fs::exists(dir) && !tpx::io::complete_steps(dir).empty();
}

// What became of a trainer run in a child process killed after `delay`: "killed", "finished",
// or the failure it reported. With first_save, the delay starts once the folder holds a complete
// checkpoint (at most 300 s), so that the runs reach one however slow the machine (under the
// sanitizers a step takes many times the delays below).
std::string run_and_kill(const trainer::options& o, std::chrono::microseconds delay,
                         bool first_save) {
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      trainer::run(o, [](const trainer::step_report&) {});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      ::_exit(3);
    }
    ::_exit(0);
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (first_save && !holds_complete_checkpoint(o.ckpt_dir) &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(delay);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return "killed";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "finished";
  return "failed (see the child's message above)";
}

std::size_t temporaries_in(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    n += entry.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

}  // namespace

TEST_CASE("20 kills during saves: every resume starts, the last continues bit for bit") {
  trainer::options o = trainer_test::small(2, 2);
  o.ckpt_dir =
      (fs::temp_directory_path() / ("tpx-trainer-kill-" + std::to_string(::getpid()))).string();
  fs::remove_all(o.ckpt_dir);
  o.steps = 100000;  // never reached: every child is killed
  o.save_every = 1;
  o.keep = 2;
  int killed = 0;
  for (int kill = 0; kill < 20; ++kill) {
    // Resume once a save has completed, `latest` moved or not (a kill between the two leaves
    // a complete checkpoint that a new run would be refused and --resume finds).
    o.resume = holds_complete_checkpoint(o.ckpt_dir);
    const std::string fate = run_and_kill(o, std::chrono::milliseconds(40 + 7 * kill), kill == 0);
    CAPTURE(kill);
    CHECK(fate != "failed (see the child's message above)");
    killed += fate == "killed";
  }
  CHECK(killed == 20);
  // --resume continues from the checkpoint `latest` names. A kill between a manifest and
  // `latest` leaves a complete checkpoint one step newer, which resume does not trust (a folder
  // newer than `latest` may be left from before a resume from an older checkpoint:
  // docs/checkpoints.md) and saves again.
  const std::optional<std::int64_t> latest = tpx::io::latest_step(o.ckpt_dir);
  REQUIRE(latest.has_value());
  const std::vector<std::int64_t> complete = tpx::io::complete_steps(o.ckpt_dir);
  CHECK(*std::max_element(complete.begin(), complete.end()) - *latest <= 1);
  const std::int64_t reached = *latest;

  trainer::options uninterrupted = trainer_test::small(2, 2);
  uninterrupted.steps = static_cast<int>(reached) + 5;
  const std::vector<float> reference = trainer_test::losses(uninterrupted);
  o.steps = uninterrupted.steps;
  o.resume = true;
  const std::vector<float> resumed = trainer_test::losses(o);
  CHECK(temporaries_in(o.ckpt_dir) == 0);
  REQUIRE(resumed.size() == 5);
  CHECK(resumed == std::vector<float>(reference.end() - 5, reference.end()));
  fs::remove_all(o.ckpt_dir);
}

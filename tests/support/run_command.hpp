// Running a program as a user would, from a test: run_command(command) runs it through the shell
// and returns its exit status and what it printed (stdout and stderr together); scratch_folder
// gives the test an empty folder of its own under the temporary directory, removed when the
// test program exits. Used by the tests of the example programs (tests/trainer/cli_test.cpp,
// tests/mpi/mpi_program_test.cpp).
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

struct command_result {
  int status = -1;     // the exit status, or 128 + the signal that ended it
  std::string output;  // stdout and stderr
};

inline command_result run_command(const std::string& command) {
  command_result r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> chunk{};
  while (std::fgets(chunk.data(), chunk.size(), pipe)) r.output += chunk.data();
  const int raw = ::pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return r;
}

// A folder of a test program's scratch folders, removed with everything in it when the program
// exits (by the process that made this object, not by a child forked from it).
class scratch_root {
 public:
  explicit scratch_root(std::filesystem::path path) : path_(std::move(path)), owner_(::getpid()) {}
  scratch_root(const scratch_root&) = delete;
  scratch_root& operator=(const scratch_root&) = delete;
  ~scratch_root() {
    std::error_code ignored;
    if (::getpid() == owner_) std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  pid_t owner_;
};

// An empty folder <tmp>/<test>-<pid>/<name>, gone when the program exits; `test` names the
// program, the same on every call.
inline std::filesystem::path scratch_folder(const std::string& test, const std::string& name) {
  static const scratch_root root(std::filesystem::temp_directory_path() /
                                 (test + "-" + std::to_string(::getpid())));
  const std::filesystem::path dir = root.path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

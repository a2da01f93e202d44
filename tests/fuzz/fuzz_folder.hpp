// fuzz_folder: an empty folder of this fuzzing process's own, where a harness writes each input
// as the file the parser under test reads (tpx's checkpoint parsers read files, never buffers).
// A harness makes one, as a static, on its first input; it is removed when the process exits
// (libFuzzer ends a timed run with exit()), and kept after a crash, with the input that crashed.
// It lies under /dev/shm when there is one (a memory file system: a fuzzer writes thousands of
// files a second) and under the system's temporary folder else.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

class fuzz_folder {
 public:
  explicit fuzz_folder(const std::string& name) {
    const std::filesystem::path shm = "/dev/shm";
    const std::filesystem::path base =
        std::filesystem::is_directory(shm) ? shm : std::filesystem::temp_directory_path();
    path_ = base / ("tpx-fuzz-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  fuzz_folder(const fuzz_folder&) = delete;
  fuzz_folder& operator=(const fuzz_folder&) = delete;
  ~fuzz_folder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

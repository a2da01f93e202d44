// directory_lock: one writer per folder, enforced by the operating system.
//
// Two trainers writing checkpoints into one folder would leave checkpoints whose every file
// passes its checksum but whose tensors come from both runs. directory_lock takes an exclusive
// flock(2) on "<dir>/lock" for as long as it lives, and writes its process id there, so that a
// second writer, in this process or another, is refused at once with the folder and the
// holder's pid named. The kernel releases a flock when its holder dies, so a killed writer never
// leaves a stale lock behind. The lock file itself stays (removing it would race with a writer
// that has just opened it); it holds nothing but the pid.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

#include "tpx/io/atomic_file.hpp"
#include "tpx/io/io_error.hpp"

namespace tpx::io {

class directory_lock {
 public:
  // Locks dir (created if missing); an io_error naming dir if it cannot be created, written or
  // locked.
  explicit directory_lock(const std::filesystem::path& dir)
      : path_(dir / "lock"), file_(open_lock_file(dir, path_)) {
    if (::flock(file_.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) throw detail::os_error(path_, "cannot lock");
      const std::string holder = read_text_file_or_empty(path_);
      throw io_error("tpx: " + dir.string() + ": checkpoint folder is in use by another writer" +
                     (holder.empty() ? std::string() : " (pid " + holder + ")") +
                     "; two runs writing one folder would mix their checkpoints: wait for it "
                     "to finish or choose another folder");
    }
    const std::string pid = std::to_string(::getpid());
    if (::ftruncate(file_.get(), 0) != 0 ||
        ::pwrite(file_.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
      throw detail::os_error(path_, "cannot write");
  }

 private:
  static detail::file_descriptor open_lock_file(const std::filesystem::path& dir,
                                                const std::filesystem::path& path) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) throw io_error("tpx: " + dir.string() + ": cannot create: " + error.message());
    if (::access(dir.c_str(), W_OK) != 0) throw detail::os_error(dir, "cannot write into");
    return detail::file_descriptor(path, O_RDWR | O_CREAT, 0644);
  }

  static std::string read_text_file_or_empty(const std::filesystem::path& path) {
    char text[32] = {};
    const detail::file_descriptor file(path, O_RDONLY);
    const ssize_t n = ::pread(file.get(), text, sizeof text - 1, 0);
    return n > 0 ? std::string(text, static_cast<std::size_t>(n)) : std::string();
  }

  std::filesystem::path path_;
  detail::file_descriptor file_;  // closing it releases the lock
};

}  // namespace tpx::io

// Files that are either wholly written or not there at all, and the checksums that prove which.
//
// write_atomically(path, fill) lets fill write through a sink into "<path>.tmp.<pid>.<n>", then
// fsyncs the file, renames it over path and fsyncs the folder. rename is atomic on POSIX file
// systems, so a reader sees the old file or the new one, never half of one; a crash leaves at
// worst a stray ".tmp." file, which nothing reads. While writing, the sink hashes every byte
// (XXH64, checksum.hpp): the returned file_digest (size and hash) goes into the checkpoint
// manifest, and verify_file recomputes it on load, naming the file if the bytes changed since.
// read_file_range reads the byte ranges a loader needs without reading the rest of the file.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "tpx/io/io_error.hpp"
#include "tpx/io/checksum.hpp"

namespace tpx::io {

// A file's size and XXH64 hash: what the manifest records per file.
struct file_digest {
  std::uint64_t bytes = 0;
  std::uint64_t xxh64 = 0;
  friend bool operator==(const file_digest&, const file_digest&) = default;
};

// 16 lowercase hex digits: how hashes are written in JSON (its numbers stop being exact at 2^53).
inline std::string to_hex(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) text[i] = digits[v & 15];
  return text;
}

namespace detail {
// The failure of a system call, read from errno at the call (before anything can change it).
inline io_error os_error(const std::filesystem::path& path, const char* what, int error = errno) {
  return io_error("tpx: " + path.string() + ": " + what + ": " +
                  std::error_code(error, std::generic_category()).message());
}

// A POSIX file descriptor, closed on scope exit.
class file_descriptor {
 public:
  file_descriptor(const std::filesystem::path& path, int flags, mode_t mode = 0)
      : fd_(::open(path.c_str(), flags | O_CLOEXEC, mode)) {
    if (fd_ < 0) throw os_error(path, "cannot open");
  }
  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;
  ~file_descriptor() { ::close(fd_); }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A name for the temporary file that no other writer, thread or process, uses at the same time.
inline std::filesystem::path temporary_name(const std::filesystem::path& path) {
  static std::atomic<unsigned> counter{0};
  return path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}
}  // namespace detail

// What fill receives: write() appends bytes to the temporary file and to the running hash.
class file_sink {
 public:
  file_sink(int fd, const std::filesystem::path& path) : fd_(fd), path_(path) {}

  void write(std::span<const std::byte> bytes) {
    hash_.update(bytes);
    written_ += bytes.size();
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw detail::os_error(path_, "cannot write");
      bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
  }
  file_digest digest() const { return {written_, hash_.digest()}; }

 private:
  int fd_;
  const std::filesystem::path& path_;
  xxh64_stream hash_;
  std::uint64_t written_ = 0;
};

// Writes path atomically with what fill(file_sink&) writes; returns the new file's digest. If
// fill throws, path is left as it was and the temporary file is removed.
template <class Fill>
file_digest write_atomically(const std::filesystem::path& path, Fill&& fill) {
  const std::filesystem::path temporary = detail::temporary_name(path);
  file_digest digest;
  try {
    detail::file_descriptor file(temporary, O_WRONLY | O_CREAT | O_EXCL, 0644);
    file_sink sink(file.get(), temporary);
    std::forward<Fill>(fill)(sink);
    if (::fsync(file.get()) != 0) throw detail::os_error(temporary, "cannot fsync");
    digest = sink.digest();
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const io_error failure = detail::os_error(path, "cannot rename the temporary file over it");
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw failure;
  }
  // The rename itself is durable only once the folder is synced.
  const std::filesystem::path folder =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  detail::file_descriptor dir(folder, O_RDONLY | O_DIRECTORY);
  if (::fsync(dir.get()) != 0) throw detail::os_error(folder, "cannot fsync the folder");
  return digest;
}

// Reads out.size() bytes of path starting at offset; a short file is an error naming it.
inline void read_file_range(const std::filesystem::path& path, std::uint64_t offset,
                            std::span<std::byte> out) {
  detail::file_descriptor file(path, O_RDONLY);
  while (!out.empty()) {
    const ssize_t n = ::pread(file.get(), out.data(), out.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw detail::os_error(path, "cannot read");
    if (n == 0)
      throw io_error("tpx: " + path.string() + ": file ends at byte " + std::to_string(offset) +
                     ", before the " + std::to_string(out.size()) + " bytes expected there");
    offset += static_cast<std::uint64_t>(n);
    out = out.subspan(static_cast<std::size_t>(n));
  }
}

// The size and XXH64 of a whole file, read in chunks.
inline file_digest digest_file(const std::filesystem::path& path) {
  detail::file_descriptor file(path, O_RDONLY);
  std::vector<std::byte> chunk(std::size_t{1} << 20);
  xxh64_stream hash;
  std::uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(file.get(), chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw detail::os_error(path, "cannot read");
    if (n == 0) return {total, hash.digest()};
    hash.update(std::span(chunk).first(static_cast<std::size_t>(n)));
    total += static_cast<std::uint64_t>(n);
  }
}

// Throws, naming the file, unless its size and hash are the expected ones.
inline void verify_file(const std::filesystem::path& path, const file_digest& expected) {
  const file_digest found = digest_file(path);
  if (found == expected) return;
  throw io_error("tpx: " + path.string() + ": checksum mismatch: the manifest records " +
                 std::to_string(expected.bytes) + " bytes with xxh64 " + to_hex(expected.xxh64) +
                 ", the file has " + std::to_string(found.bytes) + " bytes with xxh64 " +
                 to_hex(found.xxh64) + " (the file was changed or damaged after it was written)");
}

}  // namespace tpx::io

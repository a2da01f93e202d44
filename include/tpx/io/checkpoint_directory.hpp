// checkpoint_directory: the folder a run writes its checkpoints into, owned for the run's lifetime.
//
//   tpx::io::checkpoint_directory ckpt("ckpt", {.keep = 3});   // once per run, before training
//   ...  tpx::io::checkpoint_writer out(rank, ckpt, step);      // every save, on every rank
//
// Constructing it does, before any training work, what a run needs of its folder: creates it,
// proves it writable and takes its lock (directory_lock.hpp: a second writer is refused), then
// removes the temporaries ("*.tmp.*", atomic_file.hpp) that writers killed mid-save left, saying
// how many and how many bytes. It names the run: a random 64-bit run id that every file of every
// checkpoint records, so that files of two runs can never combine into one checkpoint; a run
// that resumes keeps its id (continue_run). After each complete save, retain() deletes all but
// the newest `keep` complete checkpoints (0 keeps all), only once latest points at the newest.
// One object serves every rank of the process (the thread backend's ranks share it).
//
// A job of many processes (mpirun) has one holder: its first process constructs the directory as
// above, and every other process, once the first has locked and tidied the folder and told it the
// run id (launch/process_group.hpp's first_process_decides; examples/trainer/training.hpp),
// constructs it with held_elsewhere{run_id}: no lock, no clean-up, the holder's run id. Its ranks
// write their own rank files into the folder, which must therefore be on a filesystem every
// process sees; publishing (checkpoint_writer: world rank 0) and retain() are the holder's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tpx/io/atomic_file.hpp"
#include "tpx/io/checkpoint_layout.hpp"
#include "tpx/io/directory_lock.hpp"

namespace tpx::io {

struct checkpoint_directory_options {
  int keep = 0;                        // complete checkpoints to keep; 0: all
  std::ostream* notices = &std::cerr;  // where the cleanup of temporaries is reported
};

// The folder is held by another process of this job, whose run id this is (see the top).
struct held_elsewhere {
  std::string run_id;
};

class checkpoint_directory {
 public:
  explicit checkpoint_directory(std::filesystem::path dir,
                                checkpoint_directory_options options = {})
      : path_(std::move(dir)),
        lock_(std::in_place, path_),
        keep_(options.keep),
        run_id_(new_run_id()) {
    if (keep_ < 0)
      throw std::invalid_argument("tpx: " + path_.string() + ": cannot keep " +
                                  std::to_string(keep_) + " checkpoints");
    remove_temporaries(*options.notices);
  }
  checkpoint_directory(std::filesystem::path dir, held_elsewhere holder)
      : path_(std::move(dir)), keep_(0), run_id_(std::move(holder.run_id)) {}

  const std::filesystem::path& path() const { return path_; }
  const std::string& run_id() const { return run_id_; }
  // Saves from now on belong to the run of a checkpoint this run resumed from.
  void continue_run(std::string run_id) { run_id_ = std::move(run_id); }

  // Deletes the step folders older than `published` (the checkpoint just completed, which latest
  // names) that are not among the newest `keep` complete ones up to it (incomplete ones of killed
  // saves included). Newer folders, left by a run this one resumed before, are not touched.
  void retain(std::int64_t published) const {
    if (!lock_)
      throw std::logic_error("tpx: " + path_.string() +
                             ": retention is the work of the process that holds the folder's "
                             "lock (world rank 0), not of this one");
    if (keep_ == 0) return;
    std::vector<std::int64_t> complete = complete_steps(path_);
    std::erase_if(complete, [&](std::int64_t step) { return step > published; });
    std::sort(complete.begin(), complete.end(), std::greater<>());
    const auto kept = std::span(complete).first(std::min(complete.size(), std::size_t(keep_)));
    for (const std::int64_t step : step_folders(path_))
      if (step < published && std::find(kept.begin(), kept.end(), step) == kept.end())
        std::filesystem::remove_all(step_folder(path_, step));
  }

 private:
  static std::string new_run_id() {
    std::random_device entropy;
    return to_hex(std::uint64_t{entropy()} << 32 | entropy());
  }

  // Removes the "*.tmp.*" files in the folder and its step folders; nothing else writes there
  // while the lock is held.
  void remove_temporaries(std::ostream& notices) const {
    std::uintmax_t count = 0, bytes = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path_)) {
      if (!entry.is_regular_file() ||
          entry.path().filename().string().find(".tmp.") == std::string::npos)
        continue;
      bytes += entry.file_size();
      std::filesystem::remove(entry.path());
      ++count;
    }
    if (count > 0)
      notices << "tpx: " << path_.string() << ": removed " << count
              << " temporary files of interrupted saves (" << bytes << " bytes)\n";
  }

  std::filesystem::path path_;
  std::optional<directory_lock> lock_;  // none when held_elsewhere
  int keep_;
  std::string run_id_;
};

}  // namespace tpx::io

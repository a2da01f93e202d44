// recording_ledger: the buffers that work being recorded (tpx::recorded_step) makes and frees,
// checked when the recording ends against the two memory rules of spmd/recorded_work.hpp, so that
// breaking one is an error that says which, not a replay that fails or frees memory twice:
//   - the work frees only buffers it made: freeing one made before it would be recorded too, and
//     every replay would free it again;
//   - the work frees every buffer it makes: one left alive after it would still be taken when the
//     next replay makes it again.
// A backend that records makes a ledger current on the recording thread for the time of the
// recording (recording_ledger::scope; the CUDA backend: cuda/rank_resources.hpp), and its memory
// space's buffers enter themselves while one is current (cuda/device_buffer.hpp). Checking costs
// a thread-local read per allocation and free, and a hash-map entry only while recording.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace tpx {

class recording_ledger {
 public:
  // The ledger of the recording this thread is making, or null.
  static recording_ledger* current() { return current_slot(); }

  // This thread records with `ledger` while the scope lives.
  class scope {
   public:
    explicit scope(recording_ledger& ledger) : previous_(current_slot()) { current_slot() = &ledger; }
    ~scope() { current_slot() = previous_; }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;

   private:
    recording_ledger* previous_;
  };

  // A buffer of `bytes` at `address`, made while recording.
  void made(const void* address, std::size_t bytes) { live_[address] = bytes; }
  // The buffer of `bytes` at `address`, freed while recording.
  void freed(const void* address, std::size_t bytes) {
    if (live_.erase(address) == 1) return;
    ++freed_before_;
    freed_before_bytes_ += bytes;
  }

  // Throws std::logic_error saying which rule the recorded work broke, if any.
  void check() const {
    std::string broken;
    if (freed_before_ > 0)
      broken += "the recorded work frees " + buffers(freed_before_, freed_before_bytes_) +
                " made before it, which every replay would free again";
    if (!live_.empty()) {
      std::size_t bytes = 0;
      for (const auto& [address, size] : live_) bytes += size;
      broken += std::string(broken.empty() ? "" : "; ") + "the recorded work leaves " +
                buffers(live_.size(), bytes) +
                " it made alive after it, which the next replay would make again";
    }
    if (!broken.empty())
      throw std::logic_error("tpx: " + broken +
                             " (the rules of a recorded step: spmd/recorded_work.hpp)");
  }

 private:
  static recording_ledger*& current_slot() {
    thread_local recording_ledger* ledger = nullptr;
    return ledger;
  }
  static std::string buffers(std::size_t count, std::size_t bytes) {
    return std::to_string(count) + (count == 1 ? " buffer" : " buffers") + " (" +
           std::to_string(bytes) + " bytes)";
  }

  std::unordered_map<const void*, std::size_t> live_;
  std::size_t freed_before_ = 0;
  std::size_t freed_before_bytes_ = 0;
};

}  // namespace tpx

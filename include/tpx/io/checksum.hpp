// xxh64_stream: the XXH64 hash (seed 0) of a byte stream fed piece by piece, the checksum of
// checkpoint files and manifests, computed by libxxhash (Debian: libxxhash-dev; tpx::io links it).
//
// XXH64 (Yann Collet's xxHash, specified in its doc/xxhash_spec.md) runs at memory speed and is
// a standard: `xxhsum -H1 FILE` (Debian package xxhash) or Python's `xxhash.xxh64` recompute the
// checksums a checkpoint manifest records. It detects corruption, not tampering. The seed is part
// of the checkpoint format (docs/checkpoints.md): changing it would make every existing checkpoint
// fail its checksums. The library's streaming state is opaque (its layout may change between
// versions), so it is created by the library and owned here.
#pragma once

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>

namespace tpx::io {

class xxh64_stream {
 public:
  // The seed every tpx checksum uses.
  static constexpr std::uint64_t seed = 0;

  xxh64_stream() : state_(XXH64_createState()) {
    if (!state_) throw std::bad_alloc();
    XXH64_reset(state_.get(), seed);
  }

  void update(std::span<const std::byte> bytes) {
    if (bytes.empty()) return;  // (data() may then be null)
    XXH64_update(state_.get(), bytes.data(), bytes.size());
  }

  std::uint64_t digest() const { return XXH64_digest(state_.get()); }

 private:
  struct free_state {
    void operator()(XXH64_state_t* state) const { XXH64_freeState(state); }
  };
  std::unique_ptr<XXH64_state_t, free_state> state_;
};

}  // namespace tpx::io

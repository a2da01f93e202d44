// xxh64: the XXH64 hash of a byte stream, fed piece by piece, as the checksum of checkpoint files.
//
// XXH64 (Yann Collet, xxHash; the algorithm is specified in xxHash's doc/xxhash_spec.md) reads
// 32-byte stripes into four independent 64-bit accumulators, so it runs at memory speed, and it
// is a standard: `xxhsum -H1 FILE` (Debian package xxhash) or Python's `xxhash.xxh64` recompute
// the checksums a checkpoint manifest records. It detects corruption, not tampering. This is a
// self-contained implementation (seed 0) so that tpx needs no library to read its own files;
// the unit test checks it against values computed by the reference library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace tpx::io {

class xxh64 {
 public:
  void update(std::span<const std::byte> bytes) {
    if (bytes.empty()) return;  // (data() may then be null, which memcpy must not be given)
    const std::byte* p = bytes.data();
    std::size_t n = bytes.size();
    total_ += n;
    if (buffered_ + n < stripe) {  // not enough for a stripe yet: keep the bytes
      std::memcpy(buffer_ + buffered_, p, n);
      buffered_ += n;
      return;
    }
    if (buffered_ > 0) {  // complete the buffered stripe first
      const std::size_t fill = stripe - buffered_;
      std::memcpy(buffer_ + buffered_, p, fill);
      consume_stripe(buffer_);
      p += fill;
      n -= fill;
      buffered_ = 0;
    }
    for (; n >= stripe; p += stripe, n -= stripe) consume_stripe(p);
    std::memcpy(buffer_, p, n);
    buffered_ = n;
  }

  std::uint64_t digest() const {
    std::uint64_t h = total_ >= stripe ? merge_accumulators() : prime5;
    h += total_;
    const std::byte* p = buffer_;
    std::size_t n = buffered_;
    for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round(0, load64(p)), 27) * prime1 + prime4;
    if (n >= 4) {
      h = rotl(h ^ (load32(p) * prime1), 23) * prime2 + prime3;
      p += 4;
      n -= 4;
    }
    for (; n > 0; ++p, --n)
      h = rotl(h ^ (std::to_integer<std::uint64_t>(*p) * prime5), 11) * prime1;
    h ^= h >> 33;
    h *= prime2;
    h ^= h >> 29;
    h *= prime3;
    h ^= h >> 32;
    return h;
  }

 private:
  static constexpr std::size_t stripe = 32;
  static constexpr std::uint64_t prime1 = 0x9E3779B185EBCA87ull, prime2 = 0xC2B2AE3D27D4EB4Full,
                                 prime3 = 0x165667B19E3779F9ull, prime4 = 0x85EBCA77C2B2AE63ull,
                                 prime5 = 0x27D4EB2F165667C5ull;

  static constexpr std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  static constexpr std::uint64_t round(std::uint64_t acc, std::uint64_t lane) {
    return rotl(acc + lane * prime2, 31) * prime1;
  }
  // Little-endian loads (tpx runs on little-endian hosts only: see safetensors.hpp).
  static std::uint64_t load64(const std::byte* p) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  static std::uint64_t load32(const std::byte* p) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }

  void consume_stripe(const std::byte* p) {
    for (int lane = 0; lane < 4; ++lane) acc_[lane] = round(acc_[lane], load64(p + 8 * lane));
  }
  std::uint64_t merge_accumulators() const {
    std::uint64_t h = rotl(acc_[0], 1) + rotl(acc_[1], 7) + rotl(acc_[2], 12) + rotl(acc_[3], 18);
    for (std::uint64_t a : acc_) h = (h ^ round(0, a)) * prime1 + prime4;
    return h;
  }

  std::uint64_t acc_[4] = {prime1 + prime2, prime2, 0, 0 - prime1};  // the seed-0 start
  std::byte buffer_[stripe]{};
  std::size_t buffered_ = 0;
  std::uint64_t total_ = 0;
};

}  // namespace tpx::io

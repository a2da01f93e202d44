// The checkpoints' checksum (tpx::io::xxh64_stream, include/tpx/io/checksum.hpp): libxxhash's
// XXH64 with seed 0, checked against values published outside tpx, so that a checkpoint written
// before tpx used the library still verifies. The vectors: xxHash's own sanity check (xxhsum's
// BMK_sanityCheck: a 101-byte buffer whose byte i is the top byte of the 32-bit generator
// g_i = prime^(2^i) mod 2^32, prime = 2654435761, hashed whole and by its first 1 and 14 bytes),
// and the example of Python's xxhash package. Each is fed whole and in pieces that cross the
// 32-byte stripes, as the checkpoint writer feeds its files.
#include "tpx/io/checksum.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace {

// xxhsum's sanity buffer: byte i is the top byte of g_i, where g_0 = prime and g_{i+1} = g_i^2.
std::vector<std::byte> xxhsum_sanity_buffer() {
  std::vector<std::byte> buffer(101);
  std::uint32_t generator = 2654435761u;
  for (std::byte& b : buffer) {
    b = static_cast<std::byte>(generator >> 24);
    generator *= generator;
  }
  return buffer;
}

std::vector<std::byte> bytes_of(std::string_view text) {
  const auto bytes = std::as_bytes(std::span(text));
  return {bytes.begin(), bytes.end()};
}

// The XXH64 of data fed to one xxh64_stream in the given pieces, then the rest.
std::uint64_t streamed(std::span<const std::byte> data, std::vector<std::size_t> pieces) {
  tpx::io::xxh64_stream hash;
  std::size_t at = 0;
  for (std::size_t n : pieces) {
    hash.update(data.subspan(at, n));
    at += n;
  }
  hash.update(data.subspan(at));
  return hash.digest();
}

}  // namespace

TEST_CASE("xxh64_stream is XXH64 with seed 0: xxHash's own sanity vectors") {
  CHECK(tpx::io::xxh64_stream::seed == 0);
  const std::vector<std::byte> buffer = xxhsum_sanity_buffer();
  CHECK(streamed({}, {}) == 0xEF46DB3751D8E999ull);
  CHECK(streamed(std::span(buffer).first(1), {}) == 0x4FCE394CC88952D8ull);
  CHECK(streamed(std::span(buffer).first(14), {}) == 0xCFFA8DB881BC3A3Dull);
  CHECK(streamed(std::span(buffer).first(14), {3, 0, 7}) == 0xCFFA8DB881BC3A3Dull);
  for (const std::vector<std::size_t>& pieces :
       {std::vector<std::size_t>{}, {1, 31, 33}, {32, 32, 0, 5}, {100}, {101}})
    CHECK(streamed(buffer, pieces) == 0x0EAB543384F878ADull);
}

TEST_CASE("xxh64_stream agrees with Python's xxhash.xxh64 on its documented example") {
  const std::vector<std::byte> text = bytes_of("Nobody inspects the spammish repetition");
  CHECK(streamed(text, {}) == 0xFBCEA83C8A378BF1ull);
  CHECK(streamed(text, {8, 8, 8, 8}) == 0xFBCEA83C8A378BF1ull);
}

TEST_CASE("xxh64_stream gives the one-shot XXH64 of the same bytes, for every length to 200") {
  std::vector<std::byte> data;
  for (int i = 0; i < 200; ++i) data.push_back(static_cast<std::byte>(i * 37 + 11));
  for (std::size_t n = 0; n <= data.size(); ++n) {
    const std::span<const std::byte> prefix = std::span(data).first(n);
    CHECK(streamed(prefix, {n / 3, n / 3}) == XXH64(prefix.data(), prefix.size(), 0));
  }
}

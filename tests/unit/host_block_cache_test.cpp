// host_block_cache (tensor/host_block_cache.hpp): a freed block of at least cached_from bytes is
// handed out again for the next block of its size, smaller ones are not kept, what is kept stays
// within the limit (a block that does not fit frees what was kept first; 0 keeps nothing),
// release() gives everything back, concurrent takes and gives
// from many threads lose and double nothing, and TPX_HOST_BLOCK_CACHE_MIB is read or refused with
// a sentence. Host tensors draw on it: a tensor made after one of its size was freed gets that
// one's memory, and the rank's memory_meter still counts only what tensors hold. That a failed
// allocation releases the kept blocks and tries again is spmd_resources_test's (it needs a memory
// limit, in a forked child).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tpx/tpx.hpp>
#include <vector>

#include "../support/message_of.hpp"

namespace {
TPX_MESH_AXES(X);
TPX_DIMS(B, D);
constexpr std::size_t mib = std::size_t{1} << 20;

// While not 0, every allocation of exactly this many bytes fails (the operator new below).
std::atomic<std::size_t> failing_size{0};
}  // namespace

// The program's operator new, which fails allocations of failing_size bytes: so a test can make
// one allocation inside the cache fail, as a process at its memory limit sees it. (GCC takes the
// free() of what this operator new allocated, once both are inlined, for a mismatch.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t bytes) {
  if (bytes != 0 && bytes == failing_size.load(std::memory_order_relaxed)) throw std::bad_alloc();
  if (void* p = std::malloc(bytes != 0 ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

TEST_CASE("a freed block is handed out again for its size; a small one is not kept") {
  tpx::host_block_cache cache(16 * mib);
  if (cache.limit() == 0) return;  // AddressSanitizer: the cache keeps nothing, by design
  void* a = cache.take(mib);
  cache.give(a, mib);
  CHECK(cache.kept_bytes() == mib);
  void* other_size = cache.take(mib + 64);
  CHECK(other_size != a);
  CHECK(cache.take(mib) == a);
  CHECK(cache.kept_bytes() == 0);
  cache.give(a, mib);
  cache.give(other_size, mib + 64);
  CHECK(cache.kept_bytes() == 2 * mib + 64);

  void* small = cache.take(tpx::host_block_cache::cached_from - 1);
  cache.give(small, tpx::host_block_cache::cached_from - 1);
  CHECK(cache.kept_bytes() == 2 * mib + 64);
  CHECK(cache.release() == 2 * mib + 64);
  CHECK(cache.kept_bytes() == 0);
}

TEST_CASE("a block the cache has no memory to note is freed, and its size is not left listed") {
  // Out of memory, giving a block back fails to note it (the first growth of its size's list, one
  // pointer: its map entry is made first). The block is freed; and a later take of that size
  // finds no kept block, rather than the empty list's nonexistent last one (a wild pointer, which
  // crashed tpx-train under ulimit -v about one run in sixty: trainer_cli_test).
  tpx::host_block_cache cache(16 * mib);
  if (cache.limit() == 0) return;  // AddressSanitizer: the cache keeps nothing, by design
  void* a = cache.take(mib);
  failing_size = sizeof(void*);
  cache.give(a, mib);
  failing_size = 0;
  CHECK(cache.kept_bytes() == 0);
  void* b = cache.take(mib);
  std::memset(b, 1, mib);  // a block of its own, writable throughout
  cache.give(b, mib);
  CHECK(cache.kept_bytes() == mib);
  CHECK(cache.take(mib) == b);
  cache.give(b, mib);
  CHECK(cache.release() == mib);
}

TEST_CASE("what the cache keeps stays within its limit, making room by freeing what it kept") {
  tpx::host_block_cache cache(3 * mib);
  if (cache.limit() == 0) return;
  void* blocks[3];
  for (void*& b : blocks) b = cache.take(mib);
  for (void* b : blocks) cache.give(b, mib);
  CHECK(cache.kept_bytes() == 3 * mib);
  std::set<void*> handed;
  for (int i = 0; i < 3; ++i) handed.insert(cache.take(mib));
  CHECK(handed == std::set<void*>(std::begin(blocks), std::end(blocks)));
  for (void* b : handed) cache.give(b, mib);
  // A new size that does not fit: what was kept is freed, the new block kept.
  void* two = cache.take(2 * mib);
  cache.give(two, 2 * mib);
  CHECK(cache.kept_bytes() == 2 * mib);
  CHECK(cache.take(2 * mib) == two);
  CHECK(cache.kept_bytes() == 0);
  cache.give(two, 2 * mib);
  // A block larger than the limit is never kept.
  void* four = cache.take(4 * mib);
  cache.give(four, 4 * mib);
  CHECK(cache.kept_bytes() == 2 * mib);

  tpx::host_block_cache off(0);
  void* b = off.take(mib);
  off.give(b, mib);
  CHECK(off.kept_bytes() == 0);
}

TEST_CASE("threads taking and giving blocks at once get distinct blocks and lose none") {
  tpx::host_block_cache cache(64 * mib);
  constexpr int threads = 4, rounds = 200;
  std::vector<std::vector<void*>> held(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&cache, &mine = held[t]] {
      for (int r = 0; r < rounds; ++r) {
        void* b = cache.take(mib);
        static_cast<unsigned char*>(b)[0] = static_cast<unsigned char>(r);  // it is ours
        if (r % 3 == 0)
          mine.push_back(b);
        else
          cache.give(b, mib);
      }
    });
  for (std::thread& w : workers) w.join();
  std::set<void*> distinct;
  std::size_t count = 0;
  for (const auto& mine : held) {
    distinct.insert(mine.begin(), mine.end());
    count += mine.size();
  }
  CHECK(distinct.size() == count);  // no block was handed to two holders at once
  for (const auto& mine : held)
    for (void* b : mine) cache.give(b, mib);
  const std::size_t kept = cache.kept_bytes();
  if (cache.limit() != 0) CHECK((kept > 0 && kept <= 64 * mib && kept % mib == 0));
}

TEST_CASE("TPX_HOST_BLOCK_CACHE_MIB sets the limit; a value that is no count of MiB is refused") {
  const char* saved = std::getenv("TPX_HOST_BLOCK_CACHE_MIB");
  const std::string restore = saved != nullptr ? saved : "";
  ::setenv("TPX_HOST_BLOCK_CACHE_MIB", "256", 1);
  CHECK(tpx::host_block_cache::limit_from_environment() == 256 * mib);
  ::setenv("TPX_HOST_BLOCK_CACHE_MIB", "0", 1);
  CHECK(tpx::host_block_cache::limit_from_environment() == 0);
  for (const char* bad : {"1.5", "lots", "-4", " 4", "+4", "99999999999999999999"}) {
    ::setenv("TPX_HOST_BLOCK_CACHE_MIB", bad, 1);
    CHECK(message_of([] { (void)tpx::host_block_cache::limit_from_environment(); }) ==
          std::string("tpx: TPX_HOST_BLOCK_CACHE_MIB=") + bad +
              ": not a whole number of MiB (0 turns the cache off)");
  }
  ::unsetenv("TPX_HOST_BLOCK_CACHE_MIB");
  CHECK(tpx::host_block_cache::limit_from_environment() > 0);  // a quarter of physical memory
  if (saved != nullptr) ::setenv("TPX_HOST_BLOCK_CACHE_MIB", restore.c_str(), 1);
}

TEST_CASE(
    "a host tensor made after one of its size was freed reuses its memory, metered as before") {
  tpx::spmd(tpx::host, tpx::Mesh<X>{1}, [](auto& rank) {
    const std::int64_t before = rank.memory().live_bytes();
    const void* first = nullptr;
    {
      auto t = tpx::zeros<float, B<>, D<>>(rank, {B(256), D(256)});  // 256 KiB
      first = t.data();
      CHECK(rank.memory().live_bytes() - before == 256 * 256 * 4);
    }
    CHECK(rank.memory().live_bytes() == before);
    auto again = tpx::zeros<float, B<>, D<>>(rank, {B(256), D(256)});
    if (tpx::host_block_cache::instance().limit() != 0) CHECK(again.data() == first);
    CHECK(rank.memory().live_bytes() - before == 256 * 256 * 4);
    std::size_t nonzero = 0;  // zeros() writes its zeros over the reused block
    for (float v : again.local()) nonzero += v != 0.0f;
    CHECK(nonzero == 0);
  });
}

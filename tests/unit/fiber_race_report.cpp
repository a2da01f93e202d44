// Run only under ThreadSanitizer (tests/CMakeLists.txt): proves that TSan still sees the fibers
// of tests/support/fiber_team.hpp as threads ordered only by their barriers, and so that the
// tsan stage's emulated thread blocks would report a missing __syncthreads. Two fibers share an
// int twice: first with a barrier between the write and the read, which must not be reported,
// then without one, which must be. The test passes when TSan's report follows the marker
// printed between the two runs (CTest's PASS_REGULAR_EXPRESSION), whatever the exit status.
#include <cstdio>

#include "../support/fiber_team.hpp"

int main() {
  tpx::testing::fiber_team team(2);
  tpx::testing::fiber_team::barrier between(team, 2, "between");
  int shared = 0;
  int read = 0;
  team.run([&](int f) {
    if (f == 0) shared = 1;
    between.arrive_and_wait();
    if (f == 1) read = shared;
  });
  std::fprintf(stderr, "ordered run read %d; the unordered run starts\n", read);
  team.run([&](int f) {
    if (f == 0) shared = 2;
    if (f == 1) read = shared;  // no barrier since fiber 0's write: a data race
    between.arrive_and_wait();
  });
  std::fprintf(stderr, "unordered run read %d\n", read);
}

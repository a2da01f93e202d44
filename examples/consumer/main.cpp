// The program of the sample consumer project (see CMakeLists.txt beside it): it includes a tpx
// header and uses it, so building and running it proves the include path and the link line
// that tpx::tpx hands to a user's project. It rounds 1/3 to bf16 and back and prints both.
#include <cstdio>

#include "tpx/core/bfloat16.hpp"

int main() {
  const float third = 1.0f / 3.0f;
  const tpx::bf16 stored(third);
  std::printf("tpx consumer: 1/3 = %.9f as fp32, %.9f after a bf16 round trip\n", third,
              static_cast<float>(stored));
  return 0;
}

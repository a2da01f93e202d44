// Clang at -O1 without debug information, as many sanitizer builds compile, compiles a user's
// function over tpx's host loops without a warning: the loops are marked to vectorize, Clang
// vectorizes nothing at -O1 and warns of each marked loop left as it was, at the function that
// holds it, which was the user's own, where tpx's silencing does not reach
// (kernels/host_loop.hpp). tests/CMakeLists.txt compiles this file so under Clang, with that
// warning an error; the clang preset's static tests run it.
#include <cstdint>
#include <tpx/kernels/elementwise.hpp>

float calibrated(float x);  // a user's function, compiled elsewhere: a call that stays a loop

void calibrate(std::int64_t n, const float* in, float* out) {
  tpx::kernels::transform(n, [](float x) { return calibrated(x); }, out, in);
}

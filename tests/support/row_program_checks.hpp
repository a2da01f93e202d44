// What the tests of the register-row norm programs (tests/unit/*_warp_rows_test.cpp) share: inputs
// drawn from tpx's counter-based normal generator and rounded to the storage type, a check of
// outputs against a reference computed in double on those same rounded inputs, and the shapes
// the programs are run at.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tpx/core/bfloat16.hpp>
#include <tpx/kernels/random.hpp>
#include <vector>

namespace tpx::testing {

// n values mean + N(0, 1), stored as T.
template <class T>
std::vector<T> normal_values(std::int64_t n, std::uint64_t seed, float mean = 0.0f) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[i] = static_cast<T>(mean + tpx::kernels::normal_at(seed, static_cast<std::uint64_t>(i)));
  return v;
}

// Every got[i] within tolerance * (the largest |want| + |want[i]|) of want[i]; the first three
// misses are reported by index.
template <class T>
void check_near(const std::string& what, const std::vector<T>& got, const std::vector<double>& want,
                double tolerance) {
  REQUIRE(got.size() == want.size());
  double largest = 0;
  for (double w : want) largest = std::max(largest, std::abs(w));
  int wrong = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::abs(static_cast<double>(got[i]) - want[i]) > tolerance * (largest + std::abs(want[i])) && ++wrong <= 3)
      FAIL_CHECK(what << "[" << i << "] = " << static_cast<double>(got[i]) << ", want " << want[i]);
  CHECK_MESSAGE(wrong == 0, what << ": " << wrong << " of " << want.size() << " elements off");
}

// Calls check.template operator()<W, Warps, T, Wt>(rows, d, blocks) at the shapes that cover a
// register-row program's paths, one subcase per pair of storage types. A warp per row (Warps 1):
// rows of 8, 36, 264 and 1024 columns (one vector per thread, rows that end inside a thread's
// vectors, the widest row a warp takes). The block's 8 warps per row: 264 to 8192 columns. In
// 16-byte vectors (W = 4 for fp32 and for bf16 with fp32 parameters, 8 for bf16 with bf16) and
// element by element (W = 1, what the launchers use when a row is not a whole number of vectors).
// Over 2 or 3 blocks, so that warps take different numbers of rows and some none.
template <class Check>
void for_each_row_program_shape(std::int64_t rows, const Check& check) {
  SUBCASE("fp32 rows, fp32 parameters") {
    for (std::int64_t d : {8, 36, 264, 1024}) {
      check.template operator()<4, 1, float, float>(rows, d, 2);
      check.template operator()<1, 1, float, float>(rows, d, 3);
    }
    for (std::int64_t d : {264, 3000, 8192}) check.template operator()<4, 8, float, float>(rows, d, 2);
    check.template operator()<1, 8, float, float>(rows, 4095, 3);
  }
  SUBCASE("bf16 rows, fp32 parameters (the vector is 4 elements, the parameters')") {
    for (std::int64_t d : {8, 264, 1024}) check.template operator()<4, 1, bf16, float>(rows, d, 2);
    check.template operator()<1, 1, bf16, float>(rows, 36, 3);
    check.template operator()<4, 8, bf16, float>(rows, 4096, 2);
  }
  SUBCASE("bf16 rows, bf16 parameters") {
    for (std::int64_t d : {8, 264, 1024}) check.template operator()<8, 1, bf16, bf16>(rows, d, 2);
    check.template operator()<1, 1, bf16, bf16>(rows, 36, 3);
    for (std::int64_t d : {264, 4096, 8192}) check.template operator()<8, 8, bf16, bf16>(rows, d, 2);
  }
}

}  // namespace tpx::testing

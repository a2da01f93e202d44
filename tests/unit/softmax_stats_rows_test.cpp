// The one-pass softmax stats of the GPU's cross-entropy (kernels/softmax_stats_rows.hpp), run on
// emulated blocks of 8 warps (tests/support/simt_block.hpp), against each row's max and sum of
// exp(x - max) taken in double on the same (bf16-rounded) logits. Rows of 13 logits (element by
// element), 64 (a vector for some threads, none for most), 2100 and 5000 (several vectors per
// thread, so each thread's stats merge vectors whose maxima rise and fall); logits of scale 30
// around an offset of 60, which exp of the raw values would overflow; rows with masked (-inf)
// logits, whole vectors of them, and a row of nothing but -inf (max -inf, sum 0, as
// softmax_stats_of gives). 5 rows over 2 blocks, so a block takes several rows in turn.
// Tolerances: the max is exact; the sum within 1e-5 relative (fp32 exps and a few thousand
// additions in a tree).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tpx/core/bfloat16.hpp>
#include <tpx/kernels/random.hpp>
#include <tpx/kernels/softmax_stats_rows.hpp>
#include <vector>

#include "../support/simt_block.hpp"

namespace {

using tpx::bf16;
using tpx::testing::simt_block;
namespace softmax_rows = tpx::kernels::softmax_rows;

template <int W, class T>
void check_stats(std::int64_t cols) {
  CAPTURE(W);
  CAPTURE(cols);
  const std::int64_t rows = 5, blocks = 2;
  const float masked = -std::numeric_limits<float>::infinity();
  std::vector<T> logits(rows * cols);
  for (std::int64_t i = 0; i < rows * cols; ++i)
    logits[i] = static_cast<T>(60.0f + 30.0f * tpx::kernels::normal_at(cols, static_cast<std::uint64_t>(i)));
  for (std::int64_t c = 0; c < cols; c += 3) logits[1 * cols + c] = static_cast<T>(masked);  // row 1: a third masked
  for (std::int64_t c = 0; c < std::min<std::int64_t>(cols, 8 * 300); ++c)  // row 2: its first vectors masked
    logits[2 * cols + c] = static_cast<T>(masked);
  if (cols > 8 * 300) logits[2 * cols + cols - 1] = static_cast<T>(5.0f);
  for (std::int64_t c = 0; c < cols; ++c) logits[3 * cols + c] = static_cast<T>(masked);  // row 3: all masked

  std::vector<float> max(rows, 0.0f), sum(rows, -1.0f);
  for (std::int64_t b = 0; b < blocks; ++b) {
    simt_block block(softmax_rows::warps_per_block, softmax_rows::shared_bytes);
    block.run([&](simt_block::thread_context& t) {
      softmax_rows::softmax_stats_of_rows<W>(t, b, blocks, rows, cols, logits.data(), max.data(), sum.data());
    });
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    CAPTURE(r);
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, static_cast<double>(logits[r * cols + c]));
    double s = 0;
    if (m != -std::numeric_limits<double>::infinity())
      for (std::int64_t c = 0; c < cols; ++c) s += std::exp(static_cast<double>(logits[r * cols + c]) - m);
    CHECK(max[r] == m);
    CHECK(std::abs(sum[r] - s) <= 1e-5 * s);
  }
}

TEST_CASE("one-pass softmax stats agree with the max and the sum of exps in double") {
  SUBCASE("fp32") {
    check_stats<1, float>(13);
    for (std::int64_t cols : {64, 2100, 5000}) check_stats<4, float>(cols);
  }
  SUBCASE("bf16") {
    check_stats<1, bf16>(13);
    for (std::int64_t cols : {64, 2104, 5000}) check_stats<8, bf16>(cols);
  }
}

}  // namespace

// The GPU's RMSNorm programs over rows held in registers (kernels/rmsnorm_warp_rows.hpp), run on
// emulated thread blocks of 8 warps (tests/support/simt_block.hpp), against RMSNorm written out
// here in double on the same (rounded) inputs, at the shapes of
// tests/support/row_program_checks.hpp (a warp per row and the block's 8 warps per row, in
// vectors and element by element, 37 rows over 2 or 3 blocks). The weight gradient's per-block
// partial sums are added over blocks here, as the launcher's second pass does. Under
// ThreadSanitizer the same runs check the shared memory for races between syncs.
// Tolerances: fp32 outputs within 2e-5 of the largest reference value plus 2e-5 relative (sums of
// up to 8192 terms in another order); bf16 outputs within 1e-2 of the largest plus 1e-2 relative
// (two bf16 ulps); rstd and the fp32 weight gradient 2e-5 relative in both.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <tpx/core/bfloat16.hpp>
#include <tpx/kernels/rmsnorm_warp_rows.hpp>
#include <vector>

#include "../support/row_program_checks.hpp"
#include "../support/simt_block.hpp"

namespace {

using tpx::bf16;
using tpx::testing::check_near;
using tpx::testing::normal_values;
using tpx::testing::simt_block;
namespace rows_program = tpx::kernels::warp_rows;

// RMSNorm of every row in double, from the definition.
struct reference {
  std::vector<double> y, rstd, dx, dw;
};

template <class T, class Wt>
reference rmsnorm_in_double(std::int64_t rows, std::int64_t d, const std::vector<T>& x, const std::vector<Wt>& w,
                            const std::vector<T>& dy, double eps) {
  reference ref{std::vector<double>(rows * d), std::vector<double>(rows), std::vector<double>(rows * d),
                std::vector<double>(d, 0.0)};
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto at = [&](const auto& a, std::int64_t c) { return static_cast<double>(a[r * d + c]); };
    double squares = 0, dot = 0;
    for (std::int64_t c = 0; c < d; ++c) {
      squares += at(x, c) * at(x, c);
      dot += static_cast<double>(w[c]) * at(dy, c) * at(x, c);
    }
    const double s = 1.0 / std::sqrt(squares / static_cast<double>(d) + eps);
    ref.rstd[r] = s;
    for (std::int64_t c = 0; c < d; ++c) {
      ref.y[r * d + c] = at(x, c) * s * static_cast<double>(w[c]);
      ref.dx[r * d + c] = s * static_cast<double>(w[c]) * at(dy, c) - at(x, c) * s * s * s * dot / static_cast<double>(d);
      ref.dw[c] += at(dy, c) * at(x, c) * s;
    }
  }
  return ref;
}

template <int W, int Warps, class T, class Wt>
void check_programs(std::int64_t rows, std::int64_t d, std::int64_t blocks) {
  CAPTURE(W);
  CAPTURE(Warps);
  CAPTURE(d);
  CAPTURE(blocks);
  const float eps = 1e-5f;
  const auto x = normal_values<T>(rows * d, 1 + d, 0.5f);
  const auto w = normal_values<Wt>(d, 2 + d, 1.0f);
  const auto dy = normal_values<T>(rows * d, 3 + d);
  const reference ref = rmsnorm_in_double(rows, d, x, w, dy, eps);

  std::vector<T> y(rows * d), dx(rows * d);
  std::vector<float> rstd(rows, -1.0f), partials(blocks * d, -1.0f);
  for (std::int64_t b = 0; b < blocks; ++b) {
    simt_block forward(rows_program::warps_per_block, rows_program::shared_bytes<Warps>(d));
    forward.run([&](simt_block::thread_context& t) {
      rows_program::rmsnorm_forward<W, Warps>(t, b, blocks, rows, d, x.data(), w.data(), eps, y.data(),
                                              rstd.data());
    });
    simt_block backward(rows_program::warps_per_block, rows_program::shared_bytes<Warps>(d));
    backward.run([&](simt_block::thread_context& t) {
      rows_program::rmsnorm_backward<W, Warps>(t, b, blocks, rows, d, x.data(), w.data(), rstd.data(), dy.data(),
                                               dx.data(), partials.data());
    });
  }
  std::vector<float> dw(d, 0.0f);
  for (std::int64_t b = 0; b < blocks; ++b)
    for (std::int64_t c = 0; c < d; ++c) dw[c] += partials[b * d + c];

  const double output_tolerance = std::is_same_v<T, bf16> ? 1e-2 : 2e-5;
  check_near("y", y, ref.y, output_tolerance);
  check_near("dx", dx, ref.dx, output_tolerance);
  check_near("rstd", rstd, ref.rstd, 2e-5);
  check_near("dw", dw, ref.dw, 2e-5);
}

TEST_CASE("RMSNorm's register-row programs agree with RMSNorm in double") {
  tpx::testing::for_each_row_program_shape(37, []<int W, int Warps, class T, class Wt>(auto rows, auto d, auto blocks) {
    check_programs<W, Warps, T, Wt>(rows, d, blocks);
  });
}

TEST_CASE("RMSNorm's register-row backward writes dx over dy") {
  const std::int64_t rows = 11, d = 40, blocks = 1;
  const auto x = normal_values<float>(rows * d, 7, 0.5f);
  const auto w = normal_values<float>(d, 8, 1.0f);
  auto dy = normal_values<float>(rows * d, 9);
  const reference ref = rmsnorm_in_double(rows, d, x, w, dy, 1e-5);
  std::vector<float> rstd(rows), partials(d);
  for (std::int64_t r = 0; r < rows; ++r) rstd[r] = static_cast<float>(ref.rstd[r]);
  simt_block block(rows_program::warps_per_block, rows_program::shared_bytes<1>(d));
  block.run([&](simt_block::thread_context& t) {
    rows_program::rmsnorm_backward<4, 1>(t, 0, blocks, rows, d, x.data(), w.data(), rstd.data(), dy.data(),
                                         dy.data(), partials.data());
  });
  check_near("dx in dy", dy, ref.dx, 2e-5);
  check_near("dw", partials, ref.dw, 2e-5);
}

}  // namespace

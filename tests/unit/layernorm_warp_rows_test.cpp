// The GPU's LayerNorm programs over rows held in registers (kernels/layernorm_warp_rows.hpp), run
// on emulated thread blocks of 8 warps (tests/support/simt_block.hpp), against LayerNorm written
// out here in double on the same (rounded) inputs, at the shapes of
// tests/support/row_program_checks.hpp (a warp per row and the block's 8 warps per row, in
// vectors and element by element, 37 rows over 2 or 3 blocks). The parameter gradients'
// per-block partial sums are added over blocks here, as the launcher's second pass does. The rows
// sit around 3 (the mean matters), and in one case around 300 in fp32, where a variance taken as
// E[x^2] - mean^2 would lose about 4 of fp32's 7 digits. Under ThreadSanitizer the same runs
// check the shared memory for races between syncs.
// Tolerances, as a fraction of the largest reference value plus that element's (the programs sum
// in another order than the reference, in fp32): fp32 outputs and the stats 2e-5, bf16 outputs
// 1e-2 (two bf16 ulps), the fp32 parameter gradients 2e-5.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <tpx/core/bfloat16.hpp>
#include <tpx/kernels/layernorm_warp_rows.hpp>
#include <vector>

#include "../support/row_program_checks.hpp"
#include "../support/simt_block.hpp"

namespace {

using tpx::bf16;
using tpx::testing::check_near;
using tpx::testing::normal_values;
using tpx::testing::simt_block;
namespace rows_program = tpx::kernels::warp_rows;

// LayerNorm of every row in double, from the definition.
struct reference {
  std::vector<double> y, mean, rstd, dx, dw, db;
};

template <class T, class Wt>
reference layernorm_in_double(std::int64_t rows, std::int64_t d, const std::vector<T>& x, const std::vector<Wt>& w,
                              const std::vector<Wt>& b, const std::vector<T>& dy, double eps) {
  const std::size_t n = static_cast<std::size_t>(rows * d);
  reference ref{std::vector<double>(n), std::vector<double>(rows), std::vector<double>(rows),
                std::vector<double>(n),   std::vector<double>(d, 0.0), std::vector<double>(d, 0.0)};
  const double dd = static_cast<double>(d);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto at = [&](const auto& a, std::int64_t c) { return static_cast<double>(a[r * d + c]); };
    double sum = 0;
    for (std::int64_t c = 0; c < d; ++c) sum += at(x, c);
    const double mean = sum / dd;
    double squares = 0;
    for (std::int64_t c = 0; c < d; ++c) squares += (at(x, c) - mean) * (at(x, c) - mean);
    const double rstd = 1.0 / std::sqrt(squares / dd + eps);
    ref.mean[r] = mean;
    ref.rstd[r] = rstd;
    double w_dy = 0, w_dy_xhat = 0;
    for (std::int64_t c = 0; c < d; ++c) {
      const double xhat = (at(x, c) - mean) * rstd, wc = static_cast<double>(w[c]);
      ref.y[r * d + c] = xhat * wc + static_cast<double>(b[c]);
      w_dy += wc * at(dy, c);
      w_dy_xhat += wc * at(dy, c) * xhat;
      ref.dw[c] += at(dy, c) * xhat;
      ref.db[c] += at(dy, c);
    }
    for (std::int64_t c = 0; c < d; ++c) {
      const double xhat = (at(x, c) - mean) * rstd;
      ref.dx[r * d + c] = rstd * (static_cast<double>(w[c]) * at(dy, c) - w_dy / dd - xhat * w_dy_xhat / dd);
    }
  }
  return ref;
}

// The sums over blocks of per-block partial rows [blocks, d].
std::vector<float> add_blocks(const std::vector<float>& partials, std::int64_t blocks, std::int64_t d) {
  std::vector<float> total(d, 0.0f);
  for (std::int64_t blk = 0; blk < blocks; ++blk)
    for (std::int64_t c = 0; c < d; ++c) total[c] += partials[blk * d + c];
  return total;
}

template <int W, int Warps, class T, class Wt>
void check_programs(std::int64_t rows, std::int64_t d, std::int64_t blocks, float offset = 3.0f) {
  CAPTURE(W);
  CAPTURE(Warps);
  CAPTURE(d);
  CAPTURE(blocks);
  CAPTURE(offset);
  const float eps = 1e-5f;
  const auto x = normal_values<T>(rows * d, 11 + d, offset);
  const auto w = normal_values<Wt>(d, 12 + d, 1.0f);
  const auto b = normal_values<Wt>(d, 13 + d);
  const auto dy = normal_values<T>(rows * d, 14 + d);
  const reference ref = layernorm_in_double(rows, d, x, w, b, dy, eps);

  std::vector<T> y(rows * d), dx(rows * d);
  std::vector<tpx::kernels::layernorm_stats> stats(rows, {-1.0f, -1.0f});
  std::vector<float> dw_partials(blocks * d, -1.0f), db_partials(blocks * d, -1.0f);
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    simt_block forward(rows_program::warps_per_block, rows_program::shared_bytes<Warps>(d));
    forward.run([&](simt_block::thread_context& t) {
      rows_program::layernorm_forward<W, Warps>(t, blk, blocks, rows, d, x.data(), w.data(), b.data(), eps,
                                                y.data(), stats.data());
    });
    simt_block backward(rows_program::warps_per_block, rows_program::shared_bytes<Warps>(d));
    backward.run([&](simt_block::thread_context& t) {
      rows_program::layernorm_backward<W, Warps>(t, blk, blocks, rows, d, x.data(), w.data(), stats.data(),
                                                 dy.data(), dx.data(), dw_partials.data(), db_partials.data());
    });
  }
  std::vector<float> mean(rows), rstd(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    mean[r] = stats[r].mean;
    rstd[r] = stats[r].rstd;
  }

  const double output_tolerance = std::is_same_v<T, bf16> ? 1e-2 : 2e-5;
  check_near("y", y, ref.y, output_tolerance);
  check_near("dx", dx, ref.dx, output_tolerance);
  check_near("mean", mean, ref.mean, 2e-5);
  check_near("rstd", rstd, ref.rstd, 2e-5);
  check_near("dw", add_blocks(dw_partials, blocks, d), ref.dw, 2e-5);
  check_near("db", add_blocks(db_partials, blocks, d), ref.db, 2e-5);
}

TEST_CASE("LayerNorm's register-row programs agree with LayerNorm in double") {
  tpx::testing::for_each_row_program_shape(37, []<int W, int Warps, class T, class Wt>(auto rows, auto d, auto blocks) {
    check_programs<W, Warps, T, Wt>(rows, d, blocks);
  });
}

TEST_CASE("LayerNorm's register-row forward takes the variance around the mean") {
  // fp32 rows around 300: E[x^2] - mean^2 would lose about 4 of fp32's 7 digits.
  check_programs<4, 1, float, float>(37, 768, 2, 300.0f);
  check_programs<4, 8, float, float>(37, 4096, 2, 300.0f);
}

TEST_CASE("LayerNorm's register-row backward writes dx over dy") {
  const std::int64_t rows = 11, d = 40;
  const auto x = normal_values<float>(rows * d, 21, 3.0f);
  const auto w = normal_values<float>(d, 22, 1.0f);
  const auto b = normal_values<float>(d, 23);
  auto dy = normal_values<float>(rows * d, 24);
  const reference ref = layernorm_in_double(rows, d, x, w, b, dy, 1e-5);
  std::vector<tpx::kernels::layernorm_stats> stats(rows);
  for (std::int64_t r = 0; r < rows; ++r)
    stats[r] = {static_cast<float>(ref.mean[r]), static_cast<float>(ref.rstd[r])};
  std::vector<float> dw(d), db(d);
  simt_block block(rows_program::warps_per_block, rows_program::shared_bytes<1>(d));
  block.run([&](simt_block::thread_context& t) {
    rows_program::layernorm_backward<4, 1>(t, 0, 1, rows, d, x.data(), w.data(), stats.data(), dy.data(), dy.data(),
                                           dw.data(), db.data());
  });
  check_near("dx in dy", dy, ref.dx, 2e-5);
  check_near("dw", dw, ref.dw, 2e-5);
  check_near("db", db, ref.db, 2e-5);
}

}  // namespace

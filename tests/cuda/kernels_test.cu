// Every CUDA kernel of tpx/cuda/kernels against the host running the same kernels/ functors on
// the same inputs: elementwise (16-byte vector and element paths), bias add, the sums of partial
// sums, reductions, RMSNorm and LayerNorm forward and backward, softmax and cross-entropy (and
// the one-pass row stats of the nn loss), the embeddings' sorted scatter-add of rows,
// AdamW, random initialization, copy_box, and the tensor-core attention kernels against naive
// attention in double.
//
// Tolerances, in units of roundoff: pure elementwise math agrees to a few ulps (nvcc fuses
// a*b+c into FMAs; CUDA's tanhf, expf, logf differ from glibc's in the last bits); row
// reductions sum in a tree on the GPU and serially on the host, which moves a fp32 sum of d
// terms by up to d ulps of the sum of magnitudes; results rounded to bf16 may land one bf16 ulp
// apart (two units of bf16 roundoff). Exact operations (copies, sums in the same order) must agree
// bit for bit. Each case makes its own rank_resources on device 0 (a stream, the pool, cuBLASLt),
// as a launcher would.
#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../support/attention_reference.hpp"
#include "support/device_data.hpp"
#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/kernels/adamw.hpp"
#include "tpx/cuda/kernels/copy_box.hpp"
#include "tpx/cuda/kernels/elementwise.hpp"
#include "tpx/cuda/kernels/fused_attention.hpp"
#include "tpx/cuda/kernels/norms.hpp"
#include "tpx/cuda/kernels/random.hpp"
#include "tpx/cuda/kernels/reduce.hpp"
#include "tpx/cuda/kernels/scatter_rows.hpp"
#include "tpx/cuda/kernels/softmax.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/kernels/cross_entropy.hpp"
#include "tpx/kernels/elementwise.hpp"
#include "tpx/kernels/grid_terms.hpp"
#include "tpx/kernels/layernorm.hpp"
#include "tpx/kernels/optimizer.hpp"
#include "tpx/kernels/random.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/kernels/rmsnorm.hpp"
#include "tpx/tensor/box_copy.hpp"

namespace {

using tpx::bf16;
using namespace tpx::cuda::testing;
namespace k = tpx::kernels;
namespace cu = tpx::cuda;

// f applied on the device and on the host to the same n inputs, starting `shift` elements into
// the buffers (shift 1 misaligns them and takes the element path).
template <class Out, class In, class F>
void check_unary(cu::rank_resources& gpu, F f, std::size_t n, std::size_t shift, double ulps, double unit,
                 double floor = 1e-30) {
  const std::vector<In> x = random_values<In>(n + shift, -4.0f, 4.0f, 1);
  std::vector<Out> want(n + shift);
  k::transform(static_cast<std::int64_t>(n), f, want.data() + shift, x.data() + shift);
  auto dx = to_device(gpu, x);
  cu::device_buffer<Out> dy(n + shift, gpu.pool(), gpu.stream());
  cu::transform(gpu.stream(), static_cast<std::int64_t>(n), f, dy.data() + shift, dx.data() + shift);
  CHECK(mismatches(to_host(gpu, dy), want, ulps, unit, floor) == 0);
}

template <class Out, class A, class B, class F>
void check_binary(cu::rank_resources& gpu, F f, std::size_t n, std::size_t shift, double ulps, double unit,
                  double floor = 1e-30) {
  const std::vector<A> a = random_values<A>(n + shift, -4.0f, 4.0f, 2);
  const std::vector<B> b = random_values<B>(n + shift, -4.0f, 4.0f, 3);
  std::vector<Out> want(n + shift);
  k::transform(static_cast<std::int64_t>(n), f, want.data() + shift, a.data() + shift, b.data() + shift);
  auto da = to_device(gpu, a);
  auto db = to_device(gpu, b);
  cu::device_buffer<Out> dy(n + shift, gpu.pool(), gpu.stream());
  cu::transform(gpu.stream(), static_cast<std::int64_t>(n), f, dy.data() + shift, da.data() + shift,
                db.data() + shift);
  CHECK(mismatches(to_host(gpu, dy), want, ulps, unit, floor) == 0);
}

}  // namespace

TEST_CASE("bf16 rounding on the device (the cvt instruction) equals the host's, bit for bit") {
  // Every exponent, both signs, and the mantissas where rounding decides: exact, just below,
  // at and just above the halfway point with the kept bit even and odd, the largest (which
  // rounds up into the next binade, or to infinity), and subnormals (exponent 0). NaNs must
  // stay NaNs; their payloads may differ.
  cu::rank_resources gpu(0, {});
  const std::uint32_t mantissas[] = {0x000000, 0x000001, 0x007fff, 0x008000, 0x008001, 0x00ffff,
                                     0x010000, 0x017fff, 0x018000, 0x018001, 0x3a5c3f, 0x400000,
                                     0x7f7fff, 0x7f8000, 0x7fffff};
  std::vector<float> values;
  for (std::uint32_t sign : {0u, 1u})
    for (std::uint32_t exponent = 0; exponent < 256; ++exponent)
      for (std::uint32_t mantissa : mantissas)
        values.push_back(std::bit_cast<float>(sign << 31 | exponent << 23 | mantissa));
  auto device_values = to_device(gpu, values);
  cu::device_buffer<bf16> rounded(values.size(), gpu.pool(), gpu.stream());
  cu::transform(gpu.stream(), static_cast<std::int64_t>(values.size()), k::identity{}, rounded.data(),
                static_cast<const float*>(device_values.data()));
  const std::vector<bf16> got = to_host(gpu, rounded);
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint16_t want = bf16::round_to_nearest_even(values[i]);
    const bool ok = std::isnan(values[i]) ? std::isnan(static_cast<float>(got[i])) : got[i].bits == want;
    if (!ok && wrong++ < 3)
      MESSAGE("bits " << std::hex << std::bit_cast<std::uint32_t>(values[i]) << ": device " << got[i].bits
                      << ", host " << want);
  }
  CHECK(wrong == 0);
}

TEST_CASE("transform runs the shared functors, on the vector and on the element path") {
  cu::rank_resources gpu(0, {});
  for (std::size_t shift : {0u, 1u}) {
    CAPTURE(shift);
    // Single operations: exact, or one FMA instead of two roundings (1 ulp).
    check_binary<float, float, float>(gpu, k::add{}, 1003, shift, 0, fp32_unit);
    check_binary<float, float, float>(gpu, k::mul{}, 1003, shift, 0, fp32_unit);
    check_binary<float, float, float>(gpu, k::axpy{0.75f}, 1003, shift, 0, fp32_unit);
    check_unary<float, float>(gpu, k::scale{-1.5f}, 1003, shift, 0, fp32_unit);
    check_unary<float, float>(gpu, k::relu{}, 1003, shift, 0, fp32_unit);
    // GELU and its derivative: tanhf and the FMA-contracted polynomial differ by a few ulps of
    // tanh, which 1 + tanh(..) turns into a few ulps of |x| (absolute) for negative x, where
    // it cancels; |x|, |dy| <= 4 here.
    const double gelu_floor = 16 * fp32_unit * 4, gelu_backward_floor = 64 * fp32_unit * 16;
    check_unary<float, float>(gpu, k::gelu{}, 4099, shift, 8, fp32_unit, gelu_floor);
    check_binary<float, float, float>(gpu, k::gelu_backward{}, 4099, shift, 16, fp32_unit, gelu_backward_floor);
    // bf16 storage: the fp32 results above rounded once, so at most one bf16 ulp apart (one ulp
    // is up to two units of roundoff, 2^-7 relative, at the bottom of a binade).
    check_unary<bf16, bf16>(gpu, k::gelu{}, 4099, shift, 2, bf16_unit, gelu_floor);
    check_binary<bf16, bf16, float>(gpu, k::add{}, 4099, shift, 2, bf16_unit);
    check_unary<bf16, float>(gpu, k::identity{}, 4099, shift, 0, bf16_unit);
  }
}

TEST_CASE("transform_rows adds a bias to every row, in place too") {
  cu::rank_resources gpu(0, {});
  for (std::int64_t cols : {64, 37}) {
    CAPTURE(cols);
    const std::int64_t rows = 9;
    const auto x = random_values<float>(rows * cols, -2, 2, 4);
    const auto bias = random_values<float>(cols, -1, 1, 5);
    std::vector<float> want(x.size());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) want[r * cols + c] = k::add{}(x[r * cols + c], bias[c]);
    auto dx = to_device(gpu, x);
    auto db = to_device(gpu, bias);
    cu::transform_rows(gpu.stream(), rows, cols, k::add{}, dx.data(), dx.data(), db.data());
    CHECK(mismatches(to_host(gpu, dx), want, 0, fp32_unit) == 0);  // one addition: exact
  }
}

TEST_CASE("sum_arrays sums partial sums in fp32 in rank order, bit for bit as the host") {
  cu::rank_resources gpu(0, {});
  const std::size_t n = 5000;
  std::vector<std::vector<bf16>> parts;
  std::vector<cu::device_buffer<bf16>> device_parts;
  std::vector<const bf16*> pointers;
  for (unsigned a = 0; a < 5; ++a) {
    parts.push_back(random_values<bf16>(n, -3, 3, 10 + a));
    device_parts.push_back(to_device(gpu, parts.back()));
    pointers.push_back(device_parts.back().data());
  }
  std::vector<bf16> want(n);
  for (std::size_t i = 0; i < n; ++i) {
    float s = 0;
    for (const auto& p : parts) s += static_cast<float>(p[i]);
    want[i] = s;
  }
  cu::device_buffer<bf16> out(n, gpu.pool(), gpu.stream());
  cu::sum_arrays<bf16>(gpu.stream(), n, pointers, out.data());
  CHECK(mismatches(to_host(gpu, out), want, 0, bf16_unit) == 0);
}

TEST_CASE(
    "scatter_add_rows sums each destination's rows in order: the host loop's sums, repeated") {
  // Edge cases of the sort and the pieces: one row; a table of one row (one sort bit) taking 64
  // and 1000 rows (one destination across 16 pieces); rows and a table of GPT-2's vocabulary.
  // Small-integer terms make every order of addition exact, so the device must give the host
  // loop's values; normal terms must repeat to the bit from call to call.
  cu::rank_resources gpu(0, {});
  const std::int64_t cols = 70;
  for (const auto& [rows, table] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {1, 1}, {64, 1}, {1000, 1}, {65, 3}, {1000, 50304}}) {
    CAPTURE(rows);
    CAPTURE(table);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r)
      tokens[r] = static_cast<std::int32_t>(
          k::random_words_at(31, static_cast<std::uint64_t>(r)).w[0] % table);
    std::vector<float> small(static_cast<std::size_t>(rows * cols));
    for (std::size_t i = 0; i < small.size(); ++i)
      small[i] = static_cast<float>(static_cast<int>(i % 9) - 4);
    const auto normal = random_values<float>(small.size(), -1, 1, 32);
    const auto device_tokens = to_device(gpu, tokens);
    const auto scatter = [&](const std::vector<float>& terms) {
      const auto device_terms = to_device(gpu, terms);
      cu::device_buffer<float> out(static_cast<std::size_t>(table * cols), gpu.pool(),
                                   gpu.stream());
      cu::scatter_add_rows(gpu.stream(), gpu.pool(), rows, cols, table,
                           k::token_at{device_tokens.data(), 1, 0},
                           k::element_at<float>{device_terms.data(), cols}, out.data());
      return to_host(gpu, out);
    };
    std::vector<float> want(static_cast<std::size_t>(table * cols));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) want[tokens[r] * cols + c] += small[r * cols + c];
    CHECK(mismatches(scatter(small), want, 0, 1) == 0);
    const auto once = scatter(normal);
    CHECK(mismatches(scatter(normal), once, 0, 1) == 0);
  }
}

TEST_CASE("reduce folds with the shared reducers: sum, sum of squares, maximum") {
  cu::rank_resources gpu(0, {});
  const std::int64_t n = 1 << 20;
  const auto x = random_values<float>(n, -1, 1, 20);
  auto dx = to_device(gpu, x);
  cu::device_buffer<float> result(3, gpu.pool(), gpu.stream());
  cu::reduce(gpu.stream(), gpu.pool(), n, dx.data(), k::sum_reducer<float>{}, result.data());
  cu::reduce(gpu.stream(), gpu.pool(), n, dx.data(), k::sum_of_squares_reducer<float>{}, result.data() + 1);
  cu::reduce(gpu.stream(), gpu.pool(), n, dx.data(), k::max_reducer<float>{}, result.data() + 2);
  const auto got = to_host(gpu, result);
  double magnitude = 0;
  for (float v : x) magnitude += std::abs(v);
  // A tree of fp32 additions: error below log2(n) ulps of the sum of magnitudes.
  CHECK(std::abs(got[0] - k::sum(n, x.data())) <= 21 * fp32_unit * magnitude);
  CHECK(std::abs(got[1] - k::sum_of_squares(n, x.data())) <= 21 * fp32_unit * k::sum_of_squares(n, x.data()));
  CHECK(got[2] == k::maximum(n, x.data()));
}

TEST_CASE("rmsnorm forward and backward vs the host row functions") {
  cu::rank_resources gpu(0, {});
  // Rows in registers (kernels/rmsnorm_warp_rows.hpp): a warp per row up to 1024 columns, the
  // block's 8 warps up to 8192; wider, a block per row with running sums. In 16-byte vectors
  // (256, 768, 2048, 8200) or element by element (50, 1500).
  for (std::int64_t d : {256, 50, 768, 2048, 1500, 8200}) {
    CAPTURE(d);
    const std::int64_t rows = 33;
    const auto x = random_values<bf16>(rows * d, -2, 2, 30);
    const auto w = random_values<float>(d, 0.5f, 1.5f, 31);
    const auto dy = random_values<bf16>(rows * d, -1, 1, 32);
    std::vector<bf16> y(x.size()), dx(x.size());
    std::vector<float> r(rows), dw(d, 0.5f);
    for (std::int64_t row = 0; row < rows; ++row) {
      r[row] = k::rmsnorm_forward_row(d, x.data() + row * d, w.data(), 1e-5f, y.data() + row * d);
      k::rmsnorm_backward_row(d, x.data() + row * d, w.data(), r[row], dy.data() + row * d, dx.data() + row * d,
                              dw.data());
    }
    auto dxs = to_device(gpu, x);
    auto dws = to_device(gpu, w);
    auto ddy = to_device(gpu, dy);
    cu::device_buffer<bf16> gy(x.size(), gpu.pool(), gpu.stream()), gdx(x.size(), gpu.pool(), gpu.stream());
    cu::device_buffer<float> gr(rows, gpu.pool(), gpu.stream());
    auto gdw = to_device(gpu, std::vector<float>(d, 0.5f));
    cu::rmsnorm_forward(gpu.stream(), rows, d, dxs.data(), dws.data(), 1e-5f, gy.data(), gr.data());
    cu::rmsnorm_backward(gpu.stream(), gpu.pool(), rows, d, dxs.data(), dws.data(), gr.data(), ddy.data(), gdx.data(),
                         gdw.data());
    // r: a sum of d squares in a different order (d ulps); outputs then round to bf16 (1 bf16
    // ulp, 2 units of roundoff).
    CHECK(mismatches(to_host(gpu, gr), r, 2.0 * d, fp32_unit) == 0);
    CHECK(mismatches(to_host(gpu, gy), y, 2, bf16_unit, 1e-6) == 0);
    CHECK(mismatches(to_host(gpu, gdx), dx, 2, bf16_unit, 4 * d * fp32_unit) == 0);
    // dw: sums over 33 rows of products dy x r, each r as uncertain as above: 2 d ulps per term.
    CHECK(mismatches(to_host(gpu, gdw), dw, 4.0 * rows, fp32_unit, 2.0 * d * rows * fp32_unit) == 0);
  }
}

TEST_CASE("layernorm forward and backward vs the host row functions") {
  cu::rank_resources gpu(0, {});
  // Rows in registers (kernels/layernorm_warp_rows.hpp): a warp per row up to 1024 columns (128,
  // 768; 45 element by element), the block's 8 warps up to 8192 (1100, 4096); wider (8200), a
  // block per row with running sums.
  for (std::int64_t d : {128, 45, 768, 1100, 4096, 8200}) {
    CAPTURE(d);
    const std::int64_t rows = 17;
    const auto x = random_values<float>(rows * d, 1, 3, 40);  // away from zero: the mean matters
    const auto w = random_values<float>(d, 0.5f, 1.5f, 41);
    const auto b = random_values<float>(d, -0.5f, 0.5f, 42);
    const auto dy = random_values<float>(rows * d, -1, 1, 43);
    std::vector<float> y(x.size()), dx(x.size()), dw(d, 0.0f), db(d, 0.0f);
    std::vector<k::layernorm_stats> stats(rows);
    for (std::int64_t row = 0; row < rows; ++row) {
      stats[row] = k::layernorm_forward_row(d, x.data() + row * d, w.data(), b.data(), 1e-5f, y.data() + row * d);
      k::layernorm_backward_row(d, x.data() + row * d, w.data(), stats[row], dy.data() + row * d, dx.data() + row * d,
                                dw.data(), db.data());
    }
    auto gx = to_device(gpu, x);
    auto gw = to_device(gpu, w);
    auto gb = to_device(gpu, b);
    auto gdy = to_device(gpu, dy);
    cu::device_buffer<float> gy(x.size(), gpu.pool(), gpu.stream()), gdx(x.size(), gpu.pool(), gpu.stream());
    cu::device_buffer<float> gdw(d, gpu.pool(), gpu.stream()), gdb(d, gpu.pool(), gpu.stream());
    cu::device_buffer<k::layernorm_stats> gstats(rows, gpu.pool(), gpu.stream());
    cu::layernorm_forward(gpu.stream(), rows, d, gx.data(), gw.data(), gb.data(), 1e-5f, gy.data(), gstats.data());
    cu::layernorm_backward(gpu.stream(), gpu.pool(), rows, d, gx.data(), gw.data(), gstats.data(), gdy.data(),
                           gdx.data(), gdw.data(), gdb.data());
    // Row sums in another order: d ulps of the magnitudes, which are O(1) here.
    CHECK(mismatches(to_host(gpu, gy), y, 4.0 * d, fp32_unit, 4 * d * fp32_unit) == 0);
    CHECK(mismatches(to_host(gpu, gdx), dx, 8.0 * d, fp32_unit, 8 * d * fp32_unit) == 0);
    // dw sums dy xhat over rows, each xhat as uncertain as the row's stats (d ulps); db sums dy.
    CHECK(mismatches(to_host(gpu, gdw), dw, 4.0 * rows, fp32_unit, 2.0 * d * rows * fp32_unit) == 0);
    CHECK(mismatches(to_host(gpu, gdb), db, 4.0 * rows, fp32_unit, 4 * rows * fp32_unit) == 0);
  }
}

TEST_CASE("softmax and cross-entropy vs the host, with a masked logit and an invalid target") {
  cu::rank_resources gpu(0, {});
  const std::int64_t rows = 6, n = 1000;
  auto logits = random_values<float>(rows * n, -8, 8, 50);
  logits[3 * n + 7] = -std::numeric_limits<float>::infinity();
  const std::vector<std::int64_t> targets = {0, 999, 17, 7, 500, n};  // row 5: invalid, NaN loss
  const std::vector<float> dloss = {1.0f, 0.5f, 2.0f, 1.0f, 0.25f, 1.0f};
  std::vector<float> probs(logits.size()), losses(rows), dlogits(logits.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * n;
    k::softmax_row(n, row, probs.data() + r * n);
    const auto forward = k::cross_entropy_forward_row(n, row, targets[r]);
    losses[r] = forward.loss;
    k::cross_entropy_backward_row(n, row, targets[r], forward.stats, dloss[r], dlogits.data() + r * n);
  }
  auto gl = to_device(gpu, logits);
  auto gt = to_device(gpu, targets);
  auto gd = to_device(gpu, dloss);
  cu::device_buffer<float> gp(logits.size(), gpu.pool(), gpu.stream()), gloss(rows, gpu.pool(), gpu.stream());
  cu::device_buffer<float> gdl(logits.size(), gpu.pool(), gpu.stream());
  cu::device_buffer<k::softmax_stats> gs(rows, gpu.pool(), gpu.stream());
  cu::softmax_forward(gpu.stream(), rows, n, gl.data(), gp.data());
  cu::cross_entropy_forward(gpu.stream(), rows, n, gl.data(), gt.data(), gloss.data(), gs.data());
  cu::cross_entropy_backward(gpu.stream(), rows, n, gl.data(), gt.data(), gs.data(), gd.data(), gdl.data());
  // The sum of n exponentials in another order (n ulps), then one division or log.
  CHECK(mismatches(to_host(gpu, gp), probs, 2.0 * n, fp32_unit, 1e-12) == 0);
  CHECK(mismatches(to_host(gpu, gloss), losses, 2.0 * n, fp32_unit, 2 * n * fp32_unit) == 0);
  CHECK(mismatches(to_host(gpu, gdl), dlogits, 2.0 * n, fp32_unit, 2 * n * fp32_unit) == 0);
}

TEST_CASE("one-pass softmax stats vs softmax_stats_of, at GPT-2's vocabulary and with masked logits") {
  cu::rank_resources gpu(0, {});
  // 50304: 16-byte vectors; 1001: element by element.
  for (std::int64_t n : {std::int64_t{50304}, std::int64_t{1001}}) {
    CAPTURE(n);
    const std::int64_t rows = 5;
    auto logits = random_values<bf16>(rows * n, -8, 8, 51);
    for (std::int64_t c = 0; c < n; c += 3) logits[1 * n + c] = bf16(-std::numeric_limits<float>::infinity());
    for (std::int64_t c = 0; c < n; ++c) logits[2 * n + c] = bf16(-std::numeric_limits<float>::infinity());
    std::vector<float> max(rows), sum(rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      const k::softmax_stats st = k::softmax_stats_of(n, logits.data() + r * n);
      max[r] = st.max;
      sum[r] = st.sum;
    }
    auto gl = to_device(gpu, logits);
    cu::device_buffer<float> gmax(rows, gpu.pool(), gpu.stream()), gsum(rows, gpu.pool(), gpu.stream());
    cu::softmax_stats_rows(gpu.stream(), rows, n, gl.data(), gmax.data(), gsum.data());
    CHECK(mismatches(to_host(gpu, gmax), max, 0, fp32_unit) == 0);  // a max is exact
    // The sum of n exponentials in another order: n ulps.
    CHECK(mismatches(to_host(gpu, gsum), sum, 2.0 * n, fp32_unit) == 0);
  }
}

TEST_CASE("the cross-entropy's row gradient vs the host's grid term, on a block of the vocabulary") {
  cu::rank_resources gpu(0, {});
  // A rank's block [first, first + cols) of a vocabulary of 2 cols: 25152 (half of GPT-2's, in
  // 16-byte vectors) and 1001 (element by element). Rows 0-2 have their target in the block (its
  // first, middle and last column), rows 3-5 in the other block.
  for (std::int64_t cols : {std::int64_t{25152}, std::int64_t{1001}}) {
    CAPTURE(cols);
    const std::int64_t rows = 6, width = 2, column = 1, first = cols;
    const auto logits = random_values<bf16>(rows * cols, -8, 8, 52);
    const std::int32_t block_targets[rows] = {0, 500, static_cast<std::int32_t>(cols - 1), 0, 1, 7};
    std::vector<std::int32_t> tokens(rows * width, -1);
    for (std::int64_t r = 0; r < rows; ++r)
      tokens[r * width + column] = static_cast<std::int32_t>(r < 3 ? first + block_targets[r] : block_targets[r]);
    std::vector<float> max(rows), sum(rows);
    for (std::int64_t r = 0; r < rows; ++r) {  // any stats will do: these are the block's own
      const k::softmax_stats st = k::softmax_stats_of(cols, logits.data() + r * cols);
      max[r] = st.max;
      sum[r] = st.sum * 1.5f;
    }
    const float share = 1.0f / 48.0f;
    std::vector<bf16> want(rows * cols);
    const k::cross_entropy_gradient_at<bf16, bf16> host_term{logits.data(), max.data(), sum.data(),
                                                             {tokens.data(), width, column},
                                                             first, cols, share, want.data()};
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) host_term(r, c);
    auto gl = to_device(gpu, logits);
    auto gt = to_device(gpu, tokens);
    auto gmax = to_device(gpu, max), gsum = to_device(gpu, sum);
    cu::device_buffer<bf16> got(rows * cols, gpu.pool(), gpu.stream());
    cu::cross_entropy_gradient_rows(gpu.stream(), rows, cols, gl.data(), gmax.data(), gsum.data(),
                                    k::token_at{gt.data(), width, column}, first, share, got.data());
    // exp and one multiply against exp and one division: an ulp or two of fp32 before the
    // rounding to bf16, so the results agree to one bf16 ulp (2 units of roundoff).
    CHECK(mismatches(to_host(gpu, got), want, 2, bf16_unit, 1e-9) == 0);
  }
}

TEST_CASE("adamw_step applies the host's adamw_update to every element, writing a bf16 copy") {
  cu::rank_resources gpu(0, {});
  const std::int64_t n = 3001;
  auto p = random_values<float>(n, -1, 1, 60), m = random_values<float>(n, -0.1f, 0.1f, 61);
  auto v = random_values<float>(n, 0, 0.01f, 62);
  const auto g = random_values<bf16>(n, -1, 1, 63);
  const k::adamw_update update{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1 - 0.9f * 0.9f, 1 - 0.95f * 0.95f, 0.5f};
  auto gp = to_device(gpu, p), gm = to_device(gpu, m), gv = to_device(gpu, v);
  auto gg = to_device(gpu, g);
  cu::device_buffer<bf16> model(n, gpu.pool(), gpu.stream());
  cu::adamw_step(gpu.stream(), n, update, nullptr, nullptr, gp.data(), gg.data(), gm.data(), gv.data(), model.data());
  std::vector<bf16> model_want(n);
  // m = b1 m + (1 - b1) g and v = b2 v + (1 - b2) g^2 may each be one FMA on the device: the
  // difference is a few ulps of the larger term, not of the result, which is tiny where the two
  // terms cancel (about 2% of the first moments here). So each moment is compared relative to the
  // magnitude of its terms, in ulps.
  std::vector<double> m_terms(n), v_terms(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double gs = static_cast<float>(g[i]) * update.grad_scale;
    m_terms[i] = std::abs(update.beta1 * m[i]) + std::abs((1 - update.beta1) * gs);
    v_terms[i] = std::abs(update.beta2 * v[i]) + std::abs((1 - update.beta2) * gs * gs);
    update(p[i], static_cast<float>(g[i]), m[i], v[i]);
    model_want[i] = p[i];
  }
  const auto beyond_term_ulps = [](const std::vector<float>& got, const std::vector<float>& want,
                                   const std::vector<double>& terms, double ulps) {
    std::int64_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (std::abs(double(got[i]) - double(want[i])) > ulps * fp32_unit * terms[i] && bad++ == 0)
        MESSAGE("first mismatch at " << i << ": device " << got[i] << ", host " << want[i]);
    return bad;
  };
  // A few dependent operations, each possibly fused into an FMA on the device.
  CHECK(mismatches(to_host(gpu, gp), p, 8, fp32_unit, 1e-9) == 0);  // a step of ~1e-3 near p = 0
  CHECK(beyond_term_ulps(to_host(gpu, gm), m, m_terms, 2) == 0);
  CHECK(beyond_term_ulps(to_host(gpu, gv), v, v_terms, 2) == 0);
  CHECK(mismatches(to_host(gpu, model), model_want, 2, bf16_unit, 1e-12) == 0);
}

// The step number read from device memory (a recorded step's): the bias corrections the device
// computes from it with powf agree with the host's at_step to a few ulps, so the parameters do
// to the same tolerance as above.
TEST_CASE("adamw_step reads the step number from device memory") {
  cu::rank_resources gpu(0, {});
  const std::int64_t n = 1000;
  auto p = random_values<float>(n, -1, 1, 70), m = random_values<float>(n, -0.1f, 0.1f, 71);
  auto v = random_values<float>(n, 0, 0.01f, 72);
  const auto g = random_values<float>(n, -1, 1, 73);
  const k::adamw_update base{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1.0f, 1.0f};
  const std::vector<float> step{7.0f};
  auto gp = to_device(gpu, p), gm = to_device(gpu, m), gv = to_device(gpu, v);
  auto gg = to_device(gpu, g), gstep = to_device(gpu, step);
  cu::adamw_step<float, float>(gpu.stream(), n, base, gstep.data(), nullptr, gp.data(), gg.data(), gm.data(),
                               gv.data());
  const k::adamw_update update = base.at_step(7.0f);
  for (std::int64_t i = 0; i < n; ++i) update(p[i], g[i], m[i], v[i]);
  CHECK(mismatches(to_host(gpu, gp), p, 8, fp32_unit, 1e-9) == 0);
}

TEST_CASE("fill_normal gives a shard the values the host's randn gives the same global indices") {
  cu::rank_resources gpu(0, {});
  const std::array<std::int64_t, 3> global{5, 7, 9}, offsets{1, 2, 3}, local{3, 4, 5};
  cu::device_buffer<float> shard(3 * 4 * 5, gpu.pool(), gpu.stream());
  cu::fill_normal(gpu.stream(), shard.data(), local, offsets, global, 42, 0.5f);
  std::vector<float> want;
  for (std::int64_t a = 0; a < 3; ++a)
    for (std::int64_t b = 0; b < 4; ++b)
      for (std::int64_t c = 0; c < 5; ++c) {
        const auto g = static_cast<std::uint64_t>(((a + 1) * 7 + (b + 2)) * 9 + (c + 3));
        want.push_back(0.5f * k::normal_at(42, g));
      }
  // Philox is exact on both sides; logf, cosf and sqrtf differ by a few ulps, which near a zero of
  // the cosine are a few ulps of the radius (|z| < 6), not of z.
  CHECK(mismatches(to_host(gpu, shard), want, 8, fp32_unit, 8 * 6 * fp32_unit) == 0);
}

TEST_CASE("copy_box on the device equals the host copy_box: memcpy, pitched and kernel paths") {
  cu::rank_resources gpu(0, {});
  // src [4, 6, 8], boxes chosen to hit each path; the unit of the kernel path depends on the
  // run: 8 floats (16-byte units) or 3 floats (elements).
  const std::array<std::int64_t, 3> shape{4, 6, 8};
  std::vector<float> src(4 * 6 * 8);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  struct box_case {
    std::array<std::int64_t, 3> start, box, dst_shape, dst_start;
  };
  const box_case cases[] = {
      {{1, 0, 0}, {2, 6, 8}, {2, 6, 8}, {0, 0, 0}},  // one run: cudaMemcpyAsync
      {{0, 1, 0}, {4, 3, 8}, {4, 3, 8}, {0, 0, 0}},  // runs along one dim: cudaMemcpy2DAsync
      {{0, 1, 0}, {4, 3, 4}, {5, 4, 4}, {1, 1, 0}},  // 3 outer levels, 16-byte runs: kernel, wide
      {{1, 2, 3}, {3, 3, 3}, {3, 4, 5}, {0, 1, 2}},  // kernel, element units
  };
  auto gsrc = to_device(gpu, src);
  for (const box_case& c : cases) {
    CAPTURE(c.box[2]);
    std::vector<float> want(c.dst_shape[0] * c.dst_shape[1] * c.dst_shape[2], -1.0f);
    auto gdst = to_device(gpu, want);
    tpx::copy_box(src.data(), shape, c.start, want.data(), c.dst_shape, c.dst_start, c.box);
    cu::copy_box(gpu.stream(), gsrc.data(), shape, c.start, gdst.data(), c.dst_shape, c.dst_start, c.box);
    CHECK(mismatches(to_host(gpu, gdst), want, 0, fp32_unit) == 0);
  }
}

// The tensor-core attention kernels (cuda/kernels/flash_attention.hpp), reached through the
// entry points the layers call, against naive attention in double on the same bf16 inputs:
// the real mma and shuffles behind the block programs that tests/unit/flash_attention_test.cpp
// checks on an emulated block. Widths 32, 64, 128; one row, partial tiles (T = 130) and a
// sequence of 16 tiles (T = 1024, where the causal grid's heaviest-first order matters); heads
// first, and [B, T, H, E] read in place (H = 2, 3). A misaligned array takes the CUDA-core
// kernels (checked by flash_attention_applies).
TEST_CASE("tensor-core attention equals naive attention, forward and backward") {
  cu::rank_resources gpu(0, {});
  using tpx::testing::attention_case;
  const auto run = [&]<int E>(attention_case c, std::int64_t heads = 1) {
    CAPTURE(E);
    CAPTURE(c.t_len);
    CAPTURE(heads);
    const std::int64_t n = c.sequences * c.t_len * E, rows = c.sequences * c.t_len;
    const auto q = tpx::testing::draws(n, 1), k = tpx::testing::draws(n, 2), v = tpx::testing::draws(n, 3),
               dout = tpx::testing::draws(n, 4);
    const tpx::testing::naive_attention want(c, E, q, k, v, dout);
    const auto in_layout = [&](const auto& x, std::int64_t width) {
      return to_device(gpu, tpx::testing::interleaved(x, c.t_len, heads, width));
    };
    const auto heads_first = [&](const auto& x, std::int64_t width) {
      return tpx::testing::interleaved(to_host(gpu, x), c.t_len, heads, width, true);
    };
    auto gq = in_layout(q, E), gk = in_layout(k, E), gv = in_layout(v, E),
         gdout = in_layout(dout, E);
    auto gdelta = in_layout(std::vector<float>(want.delta.begin(), want.delta.end()), 1);
    cu::device_buffer<bf16> out(n, gpu.pool(), gpu.stream()), dq(n, gpu.pool(), gpu.stream()),
        dk(n, gpu.pool(), gpu.stream()), dv(n, gpu.pool(), gpu.stream());
    cu::device_buffer<float> lse(rows, gpu.pool(), gpu.stream());
    REQUIRE(cu::flash_attention_applies(E, {gq.data(), out.data()}));
    const float scale = 1.0f / std::sqrt(float(E));
    const auto shape = tpx::kernels::attention_shape::whole_sequences({c.t_len, heads});
    cu::fused_attention_forward(gpu.stream(), c.sequences, shape, E, scale, gq.data(), gk.data(),
                                gv.data(), out.data(), lse.data());
    cu::fused_attention_backward(gpu.stream(), c.sequences, shape, E, scale, gq.data(), gk.data(),
                                 gv.data(), gdout.data(), lse.data(), gdelta.data(), dq.data(),
                                 dk.data(), dv.data());
    tpx::testing::check_close("out", heads_first(out, E), want.out);
    const std::vector<float> got_lse = heads_first(lse, 1);
    for (std::int64_t i = 0; i < rows; ++i)
      CHECK(got_lse[i] == doctest::Approx(want.lse[i]).epsilon(1e-4));
    tpx::testing::check_close("dq", heads_first(dq, E), want.dq, want.dq_terms);
    tpx::testing::check_close("dk", heads_first(dk, E), want.dk, want.dk_terms);
    tpx::testing::check_close("dv", heads_first(dv, E), want.dv);
  };
  run.operator()<32>({3, 1});
  run.operator()<64>({3, 130});
  run.operator()<128>({2, 130});
  run.operator()<64>({2, 1024});
  run.operator()<64>({4, 130}, 2);
  run.operator()<32>({6, 100}, 3);
  run.operator()<128>({4, 1024}, 2);
  cu::device_buffer<bf16> buffer(64 * 64 + 1, gpu.pool(), gpu.stream());
  CHECK_FALSE(cu::flash_attention_applies(64, {buffer.data() + 1}));
  CHECK_FALSE(cu::flash_attention_applies(48, {buffer.data()}));
}

// The tensor-core attention kernels' block programs (kernels/flash_attention.hpp), run on an
// emulated thread block (tests/support/simt_block.hpp) whose mma follows the PTX fragment table:
// the fragment loads of kernels/mma_fragments.hpp against exact products of small integers, and
// the forward, dq and dk/dv programs against naive causal attention in double on the same
// bf16-rounded inputs, at head widths 32, 64 and 128, sequences of 1 row, one whole tile, and
// several tiles with a partial last one (T = 100, 130), so masking, tails and the online softmax's
// rescaling all run. Under ThreadSanitizer the same run checks the programs' shared memory for
// races between syncs (tests/support/simt_block.hpp).
// Tolerances: the fragment tests are exact (integers below 2^8 and their sums are exact in bf16
// and fp32). Outputs are bf16 and P and dS enter their second product rounded to bf16 (8
// significant bits), so each of out, dq, dk, dv is within 1e-2 of its largest magnitude plus
// 1e-2 relative; lse is fp32 throughout: 1e-4.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <tpx/kernels/flash_attention.hpp>
#include <vector>

#include "../support/attention_reference.hpp"
#include "../support/simt_block.hpp"

namespace {

using tpx::bf16;
namespace flash = tpx::kernels::flash;
namespace mma = tpx::kernels::mma;
using tpx::testing::attention_case;
using tpx::testing::check_close;
using tpx::testing::draws;
using tpx::testing::naive_attention;
using tpx::testing::simt_block;

// One warp: D = A B through the loaders, the emulated mma and, for `chained`, a second product
// whose A operand is the first product's accumulators.
TEST_CASE("mma fragment loads agree with the PTX layout") {
  std::vector<bf16> a(16 * 16), b(16 * 8), b_transposed(8 * 16), b2(16 * 8);
  auto small = [](int i, int salt) {
    return bf16(static_cast<float>((i * 7 + salt * 13) % 9 - 4));
  };
  for (int i = 0; i < 256; ++i) a[i] = small(i, 1);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) {
      b[k * 8 + n] = b_transposed[n * 16 + k] = small(k * 8 + n, 2);
      b2[k * 8 + n] = small(k * 8 + n, 3);
    }
  std::vector<float> want(16 * 8, 0.0f);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 16; ++k) want[r * 8 + n] += float(a[r * 16 + k]) * float(b[k * 8 + n]);

  SUBCASE("A rows, B as stored and B transposed") {
    for (int valid_rows : {16, 11}) {
      std::vector<float> got(16 * 8, 0.0f), got_t(16 * 8, 0.0f);
      simt_block block(1, 0);
      block.run([&](simt_block::thread_context& t) {
        const mma::lane_coordinates at(t.lane());
        std::uint32_t fa[4], fb[2], fbt[2];
        mma::load_a(fa, a.data(), 16, valid_rows, at);
        mma::load_b(fb, b.data(), 8, at);
        mma::load_b_transposed(fbt, b_transposed.data(), 16, at);
        float d[4] = {}, dt[4] = {};
        t.mma(d, fa, fb);
        t.mma(dt, fa, fbt);
        for (int i = 0; i < 4; ++i) {
          const int r = mma::accumulator_row(at, i), c = mma::accumulator_column(at, i);
          got[r * 8 + c] = d[i];
          got_t[r * 8 + c] = dt[i];
        }
      });
      for (int r = 0; r < 16; ++r)
        for (int n = 0; n < 8; ++n) {
          const float expected = r < valid_rows ? want[r * 8 + n] : 0.0f;
          CHECK(got[r * 8 + n] == expected);
          CHECK(got_t[r * 8 + n] == expected);
        }
    }
  }

  SUBCASE("accumulators become the next product's A operand") {
    // [C | C'] (16x16) times b2, where C = A B and C' = A B with b's columns reversed.
    std::vector<bf16> b_reversed(16 * 8);
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < 8; ++n) b_reversed[k * 8 + n] = b[k * 8 + (7 - n)];
    for (float c : want) REQUIRE(std::abs(c) <= 256.0f);  // so that C rounds to bf16 exactly
    std::vector<float> got(16 * 8, 0.0f);
    simt_block block(1, 0);
    block.run([&](simt_block::thread_context& t) {
      const mma::lane_coordinates at(t.lane());
      std::uint32_t fa[4], fb[2], fr[2], f2[2], chained[4];
      mma::load_a(fa, a.data(), 16, 16, at);
      mma::load_b(fb, b.data(), 8, at);
      mma::load_b(fr, b_reversed.data(), 8, at);
      mma::load_b(f2, b2.data(), 8, at);
      float left[4] = {}, right[4] = {}, d[4] = {};
      t.mma(left, fa, fb);
      t.mma(right, fa, fr);
      mma::a_from_accumulators(chained, left, right);
      t.mma(d, chained, f2);
      for (int i = 0; i < 4; ++i)
        got[mma::accumulator_row(at, i) * 8 + mma::accumulator_column(at, i)] = d[i];
    });
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        double expected = 0;
        for (int k = 0; k < 16; ++k) {
          const double c = k < 8 ? want[r * 8 + k] : want[r * 8 + (7 - (k - 8))];
          expected += c * float(b2[k * 8 + n]);
        }
        CHECK(double(got[r * 8 + n]) == expected);
      }
  }
}

template <int E>
void check_programs(const attention_case& c) {
  CAPTURE(E);
  CAPTURE(c.sequences);
  CAPTURE(c.t_len);
  const std::int64_t n = c.sequences * c.t_len * E;
  const auto q = draws(n, 1), k = draws(n, 2), v = draws(n, 3), dout = draws(n, 4);
  const naive_attention want(c, E, q, k, v, dout);
  std::vector<bf16> out(n), dq(n), dk(n), dv(n);
  std::vector<float> lse(c.sequences * c.t_len), delta(want.delta.begin(), want.delta.end());
  const flash::arguments args{c.t_len,     1.0f / std::sqrt(float(E)),
                              q.data(),    k.data(),
                              v.data(),    out.data(),
                              lse.data(),  lse.data(),
                              dout.data(), delta.data(),
                              dq.data(),   dk.data(),
                              dv.data()};
  const auto blocks = [&](int rows) { return (c.t_len + rows - 1) / rows; };
  for (std::int64_t sq = 0; sq < c.sequences; ++sq)
    for (std::int64_t b = 0; b < blocks(flash::forward_block_rows<E>); ++b) {
      simt_block forward(flash::warps, flash::forward_shared_bytes<E>);
      forward.run([&](auto& t) { flash::forward_block<E>(t, args, b, sq); });
    }
  for (std::int64_t sq = 0; sq < c.sequences; ++sq)  // the backward reads every row's lse
    for (std::int64_t b = 0; b < blocks(flash::backward_block_rows); ++b) {
      simt_block dq_pass(flash::warps, flash::forward_shared_bytes<E>);
      dq_pass.run([&](auto& t) { flash::dq_block<E>(t, args, b, sq); });
      simt_block dkdv_pass(flash::warps, flash::dkdv_shared_bytes<E>);
      dkdv_pass.run([&](auto& t) { flash::dkdv_block<E>(t, args, b, sq); });
    }
  check_close("out", out, want.out);
  for (std::size_t i = 0; i < lse.size(); ++i)
    CHECK(lse[i] == doctest::Approx(want.lse[i]).epsilon(1e-4));
  check_close("dq", dq, want.dq);
  check_close("dk", dk, want.dk);
  check_close("dv", dv, want.dv);
}

TEST_CASE("tensor-core attention programs match naive causal attention") {
  check_programs<32>({2, 1});
  check_programs<64>({1, 64});
  check_programs<64>({2, 130});
  check_programs<64>({1, 100});
  check_programs<32>({1, 200});
  check_programs<128>({1, 70});
}

}  // namespace

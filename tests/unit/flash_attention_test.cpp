// The tensor-core attention kernels' block programs (kernels/flash_attention.hpp), run on an
// emulated thread block (tests/support/simt_block.hpp) whose mma follows the PTX fragment table:
// the fragment loads of kernels/mma_fragments.hpp (ldmatrix included) against exact products of
// small integers, and the forward, dq and dk/dv programs against naive causal attention in
// double on the same bf16-rounded inputs, at head widths 32, 64 and 128, sequences of 1 row,
// one whole tile, and several tiles with a partial last one (T = 100, 130), so masking, tails
// and the online softmax's rescaling all run, with the kernels' tilings and with the others the
// attention-tilings bench times (staged tiles of 32 and 128 rows, one or two row tiles per
// warp); heads first ([sequences, T, E]) and read in place from the projections' [B, T, H, E]
// (kernels::attention_layout with H = 2, 3), whose rows the test moves from and back to the
// reference's heads-first order itself; and over a block of each sequence's queries against every
// key (context parallelism's: the query side's rows read in place within the whole sequence's
// arrays), against naive attention of the whole sequence with dout 0 outside the block; and
// grouped-query attention (several query sequences per key sequence, heads first and in
// [B, T, H, G, E]) against naive attention with each key sequence repeated. Under
// ThreadSanitizer the
// same run checks the programs' shared memory for races between syncs
// (tests/support/simt_block.hpp). Tolerances: the fragment tests are exact (integers below 2^8 and
// their sums are exact in bf16 and fp32). Outputs are bf16 and P and dS enter their second product
// rounded to bf16 (8 significant bits), so each of out, dq, dk, dv is within 1e-2 of its largest
// magnitude plus 1e-2 relative; lse is fp32 throughout: 1e-4.
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
using tpx::testing::interleaved;
using tpx::testing::naive_attention;
using tpx::testing::simt_block;

// Small integers, exact in bf16 and in every sum below.
bf16 small(int i, int salt) { return bf16(static_cast<float>((i * 7 + salt * 13) % 9 - 4)); }

// Runs `lanes(thread, at)` on one emulated warp; it writes accumulators d[j] (16 x 8 each) into
// `got` ([16][8 * tiles]) at column 8 j.
template <int Tiles, class Lanes>
std::vector<float> one_warp(const Lanes& lanes) {
  std::vector<float> got(16 * 8 * Tiles, 0.0f);
  simt_block block(1, 0);
  block.run([&](simt_block::thread_context& t) {
    const mma::lane_coordinates at(t.lane());
    float d[Tiles][4] = {};
    lanes(t, at, d);
    for (int j = 0; j < Tiles; ++j)
      for (int i = 0; i < 4; ++i)
        got[mma::accumulator_row(at, i) * 8 * Tiles + 8 * j + mma::accumulator_column(at, i)] =
            d[j][i];
  });
  return got;
}

// The warp's fragment loads (load_a from rows; the two ldmatrix loads of B) and the accumulator
// chaining against exact products of small integers: a mistake in any lane's layout moves
// products to the wrong place.
TEST_CASE("mma fragment loads agree with the PTX layout") {
  // a: 16 x 32 (two k-steps); m: 8 x 32, read transposed; w: 32 x 16 (two column tiles).
  std::vector<bf16> a(16 * 32), m(8 * 32), w(32 * 16);
  for (int i = 0; i < 16 * 32; ++i) a[i] = small(i, 1);
  for (int i = 0; i < 8 * 32; ++i) m[i] = small(i, 2);
  for (int i = 0; i < 32 * 16; ++i) w[i] = small(i, 3);

  // Every lane's A fragment (4 registers), as `load(thread, at, a)` loads it, lane by lane.
  const auto a_fragments = [](const auto& load) {
    std::vector<std::uint32_t> registers(32 * 4);
    simt_block block(1, 0);
    block.run([&](simt_block::thread_context& t) {
      std::uint32_t fragment[4];
      load(t, mma::lane_coordinates(t.lane()), fragment);
      for (int i = 0; i < 4; ++i) registers[4 * t.lane() + i] = fragment[i];
    });
    return registers;
  };
  // load_a is checked against the mma table below; the emulated ldmatrix follows PTX's own.
  const auto load_a_rows = [&](auto&, mma::lane_coordinates at, std::uint32_t(&f)[4]) {
    mma::load_a(f, a.data() + 16, 32, 16, at);
  };

  SUBCASE("A from shared memory by one ldmatrix: load_a's fragments") {
    CHECK(a_fragments([&](auto& t, mma::lane_coordinates, std::uint32_t(&f)[4]) {
            mma::load_a_x4(t, f, a.data() + 16, 32);
          }) == a_fragments(load_a_rows));
  }

  SUBCASE(
      "A as the transpose of a stored block, by one ldmatrix.trans: load_a's of the transpose") {
    std::vector<bf16> transposed(16 * 32);  // transposed[c][r] = a[r][16 + c], at pitch 32
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c) transposed[c * 32 + r] = a[r * 32 + 16 + c];
    CHECK(a_fragments([&](auto& t, mma::lane_coordinates, std::uint32_t(&f)[4]) {
            mma::load_a_transposed_x4(t, f, transposed.data(), 32);
          }) == a_fragments(load_a_rows));
  }

  SUBCASE("A rows and B transposed (two k-steps per ldmatrix)") {
    for (int valid_rows : {16, 11}) {
      const auto got = one_warp<1>([&](auto& t, mma::lane_coordinates at, float(&d)[1][4]) {
        std::uint32_t fa[2][4], fb[2][2];
        mma::load_a(fa[0], a.data(), 32, valid_rows, at);
        mma::load_a(fa[1], a.data() + 16, 32, valid_rows, at);
        mma::load_b_transposed_x2(t, fb, m.data(), 32);
        t.mma(d[0], fa[0], fb[0]);
        t.mma(d[0], fa[1], fb[1]);
      });
      for (int r = 0; r < 16; ++r)
        for (int n = 0; n < 8; ++n) {
          float want = 0;
          for (int k = 0; k < 32; ++k) want += float(a[r * 32 + k]) * float(m[n * 32 + k]);
          CHECK(got[r * 8 + n] == (r < valid_rows ? want : 0.0f));
        }
    }
  }

  SUBCASE("B as stored (two column tiles per ldmatrix.trans), then accumulators as A") {
    // C = A[:, 0:16] w[0:16, :] (16 x 16, two tiles), then D = C w[16:32, 0:8], with C entering
    // as the A operand straight from the accumulators.
    std::vector<float> c(16 * 16, 0.0f);
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 16; ++n)
        for (int k = 0; k < 16; ++k) c[r * 16 + n] += float(a[r * 32 + k]) * float(w[k * 16 + n]);
    for (float x : c) REQUIRE(std::abs(x) <= 256.0f);  // so that C rounds to bf16 exactly
    const auto got_c = one_warp<2>([&](auto& t, mma::lane_coordinates at, float(&d)[2][4]) {
      std::uint32_t fa[4], fb[2][2];
      mma::load_a(fa, a.data(), 32, 16, at);
      mma::load_b_x2(t, fb, w.data(), 16);
      t.mma(d[0], fa, fb[0]);
      t.mma(d[1], fa, fb[1]);
    });
    CHECK(got_c == c);
    const auto got = one_warp<1>([&](auto& t, mma::lane_coordinates at, float(&d)[1][4]) {
      std::uint32_t fa[4], fb[2][2], second[2][2], chained[4];
      mma::load_a(fa, a.data(), 32, 16, at);
      mma::load_b_x2(t, fb, w.data(), 16);
      float left[4] = {}, right[4] = {};
      t.mma(left, fa, fb[0]);
      t.mma(right, fa, fb[1]);
      mma::a_from_accumulators(chained, left, right);
      mma::load_b_x2(t, second, w.data() + 16 * 16, 16);
      t.mma(d[0], chained, second[0]);
    });
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        double want = 0;
        for (int k = 0; k < 16; ++k) want += c[r * 16 + k] * double(w[(16 + k) * 16 + n]);
        CHECK(double(got[r * 8 + n]) == want);
      }
  }
}

// One case's inputs in the programs' layout (heads first, or [B, T, H, E] with `heads` key heads
// per position), the naive reference on them, the programs' outputs and arguments, the forward
// run with Forward, and the checks of the backward's outputs against the reference. c counts the
// key sequences; with `group` > 1 (grouped-query attention) each is read by `group` query
// sequences, the reference is naive attention with each key sequence repeated for its group, and
// dk and dv are checked against its gradients summed over the group.
template <int E, class Forward = flash::forward_tiling<E>>
struct programs_case {
  attention_case c;
  std::int64_t heads, group;
  attention_case queries{c.sequences * group, c.t_len};
  std::int64_t rows = c.t_len * E;  // the elements of one sequence
  std::int64_t n = queries.sequences * rows, key_n = c.sequences * rows;
  std::vector<bf16> q = draws(n, 1), k = draws(key_n, 2), v = draws(key_n, 3), dout = draws(n, 4);
  naive_attention want{queries, E, q, repeated(k), repeated(v), dout};
  std::vector<bf16> lq = in_layout(q, heads*group, E), lk = in_layout(k, heads, E),
                    lv = in_layout(v, heads, E), ldout = in_layout(dout, heads*group, E);
  std::vector<bf16> out = std::vector<bf16>(n), dq = out, dk = std::vector<bf16>(key_n), dv = dk;
  std::vector<float> lse = std::vector<float>(queries.sequences * c.t_len),
                     delta = in_layout(std::vector<float>(want.delta.begin(), want.delta.end()),
                                       heads*group, 1);
  flash::arguments args{{{c.t_len, heads* group}, {c.t_len, heads}, 0, group},
                        1.0f / std::sqrt(float(E)),
                        lq.data(),
                        lk.data(),
                        lv.data(),
                        out.data(),
                        lse.data(),
                        lse.data(),
                        ldout.data(),
                        delta.data(),
                        dq.data(),
                        dk.data(),
                        dv.data()};

  programs_case(attention_case c_, std::int64_t heads_, std::int64_t group_ = 1)
      : c(c_), heads(heads_), group(group_) {
    for (std::int64_t sq = 0; sq < queries.sequences; ++sq)
      for (std::int64_t b = 0; b < blocks(Forward::block_rows); ++b) {
        simt_block forward(flash::warps, flash::forward_shared_bytes<E, Forward>);
        forward.run([&](auto& t) { flash::forward_block<E, Forward>(t, args, b, sq); });
      }
  }
  // Key sequence s / group for each query sequence s.
  std::vector<bf16> repeated(const std::vector<bf16>& x) const {
    std::vector<bf16> r;
    for (std::int64_t sq = 0; sq < queries.sequences; ++sq)
      r.insert(r.end(), x.begin() + (sq / group) * rows, x.begin() + (sq / group + 1) * rows);
    return r;
  }
  // A query sequences' array summed over each key sequence's group.
  std::vector<double> summed(const std::vector<double>& x) const {
    std::vector<double> r(static_cast<std::size_t>(key_n), 0.0);
    for (std::int64_t i = 0; i < n; ++i) r[(i / rows / group) * rows + i % rows] += x[i];
    return r;
  }
  template <class V>
  V in_layout(const V& x, std::int64_t per_position, std::int64_t width) const {
    return interleaved(x, c.t_len, per_position, width);
  }
  template <class V>
  V heads_first(const V& x, std::int64_t per_position, std::int64_t width) const {
    return interleaved(x, c.t_len, per_position, width, true);
  }
  std::int64_t blocks(int block_rows) const { return (c.t_len + block_rows - 1) / block_rows; }
  void check_forward() const {
    check_close("out", heads_first(out, heads * group, E), want.out);
    const auto lse_rows = heads_first(lse, heads * group, 1);
    for (std::size_t i = 0; i < lse_rows.size(); ++i)
      CHECK(lse_rows[i] == doctest::Approx(want.lse[i]).epsilon(1e-4));
  }
  void check_backward() const {
    check_close("dq", heads_first(dq, heads * group, E), want.dq, want.dq_terms);
    check_close("dk", heads_first(dk, heads, E), summed(want.dk), summed(want.dk_terms));
    check_close("dv", heads_first(dv, heads, E), summed(want.dv));
  }
};

// The programs at head width E with the given tilings (the kernels' own by default): the
// forward's, dq's and dk-dv's (its grouped instantiation with `group` > 1).
template <int E, class Forward = flash::forward_tiling<E>, class Dq = flash::backward_tiling,
          class Dkdv = flash::backward_tiling>
void check_programs(const attention_case& c, std::int64_t heads = 1, std::int64_t group = 1) {
  CAPTURE(E);
  CAPTURE(Forward::row_tiles);
  CAPTURE(Forward::cols);
  CAPTURE(Dq::cols);
  CAPTURE(Dkdv::cols);
  CAPTURE(c.sequences);
  CAPTURE(c.t_len);
  CAPTURE(heads);
  CAPTURE(group);
  programs_case<E, Forward> run(c, heads, group);
  // The backward reads every row's lse: the forward has run on every sequence.
  for (std::int64_t sq = 0; sq < run.queries.sequences; ++sq)
    for (std::int64_t b = 0; b < run.blocks(Dq::block_rows); ++b) {
      simt_block dq_pass(flash::warps, flash::staged_bytes<E, Dq>);
      dq_pass.run([&](auto& t) { flash::dq_block<E, Dq>(t, run.args, b, sq); });
    }
  for (std::int64_t ks = 0; ks < c.sequences; ++ks)
    for (std::int64_t b = 0; b < run.blocks(Dkdv::block_rows); ++b) {
      simt_block dkdv_pass(flash::warps, flash::dkdv_shared_bytes<E, Dkdv>);
      dkdv_pass.run([&](auto& t) {
        if (group == 1)
          flash::dkdv_block<E, Dkdv>(t, run.args, b, ks);
        else
          flash::dkdv_block<E, Dkdv, true>(t, run.args, b, ks);
      });
    }
  run.check_forward();
  run.check_backward();
}

TEST_CASE("tensor-core attention programs match naive causal attention") {
  check_programs<32>({2, 1});
  check_programs<64>({1, 64});
  check_programs<64>({2, 130});
  check_programs<64>({1, 100});
  check_programs<32>({1, 200});
  check_programs<128>({1, 70});
}

// The other tilings tpx-bench-cuda attention-tilings times: staged tiles of 32 and 128 rows, one
// or two row tiles per warp, the queries in shared memory. T = 130 and 260 end in a partial tile
// of each size, and in blocks of more rows than a warp's some warps skip key tiles they do not
// see.
TEST_CASE("tensor-core attention programs match naive causal attention with other tilings") {
  using flash::tiling;
  check_programs<64, tiling<1, 64>, tiling<1, 32>, tiling<1, 32>>({2, 130});
  check_programs<64, tiling<1, 128>, tiling<1, 128>, tiling<1, 128>>({1, 260});
  check_programs<64, tiling<2, 32>>({1, 260});
  check_programs<128, tiling<1, 32>, tiling<1, 32>, tiling<1, 32>>({1, 130});
  // The block's queries staged in shared memory rather than held in registers.
  check_programs<64, tiling<2, 64, 0, true>>({1, 260});
  check_programs<128, tiling<1, 128, 0, true>>({1, 130});
}

// The one-pass backward (one_pass_block, then sum_dq_shares_block) on the forward's out and lse,
// split by split as a grid would run them (each split's blocks in any order against the others:
// no split reads another's share), against naive attention's dq, dk and dv.
template <int E>
void check_one_pass(const attention_case& c, std::int64_t splits, std::int64_t heads = 1) {
  CAPTURE(E);
  CAPTURE(c.sequences);
  CAPTURE(c.t_len);
  CAPTURE(splits);
  programs_case<E> run(c, heads);
  // Poisoned, so that a share read before it is written shows.
  std::vector<float> shares(splits * run.n, std::nanf(""));
  for (std::int64_t split = splits - 1; split >= 0; --split)  // the grid's order is not ours
    for (std::int64_t sq = 0; sq < c.sequences; ++sq) {
      simt_block pass(flash::warps, flash::one_pass_shared_bytes<E>);
      pass.run([&](auto& t) {
        flash::one_pass_block<E>(t, run.args, shares.data(), splits, split, sq, c.sequences);
      });
    }
  for (std::int64_t sq = 0; sq < c.sequences; ++sq)
    for (std::int64_t b = 0; b < run.blocks(flash::backward_tiling::block_rows); ++b) {
      simt_block sum(flash::warps, 0);
      sum.run([&](auto& t) {
        flash::sum_dq_shares_block<E>(t, run.args, shares.data(), splits, b, sq, c.sequences);
      });
    }
  run.check_backward();
}

// One split and several (as many as the key blocks, more than there are), partial last tiles,
// and [B, T, H, E] in place.
TEST_CASE("the one-pass tensor-core backward matches naive causal attention") {
  check_one_pass<64>({2, 130}, 1);
  check_one_pass<64>({1, 260}, 2);
  check_one_pass<64>({1, 130}, 3);
  check_one_pass<64>({1, 100}, 4);
  check_one_pass<32>({4, 100}, 2, 2);
  check_one_pass<128>({1, 70}, 1);
}

TEST_CASE("tensor-core attention programs read and write [B, T, H, E] in place") {
  check_programs<64>({4, 130}, 2);
  check_programs<32>({6, 100}, 3);
  check_programs<128>({2, 70}, 2);
}

// A block of each sequence's queries, rows [first, first + rows) of T, against all T keys, as
// context parallelism gives a rank (and each chunk of its load-balanced order, rows of a longer
// block in place: the query side's layout has a pitch of T positions). The reference is naive
// attention of the whole sequences with dout 0 outside the block: its out, lse and dq on the
// block's rows, and its dk and dv, the block's queries' share of each key's gradient (the other
// rows' terms vanish with their dout; keys after the block's last query get 0). The programs must
// leave the rows outside the block as they were.
template <int E>
void check_query_block(const attention_case& c, std::int64_t first, std::int64_t rows,
                       std::int64_t heads = 1) {
  CAPTURE(E);
  CAPTURE(c.sequences);
  CAPTURE(c.t_len);
  CAPTURE(first);
  CAPTURE(rows);
  CAPTURE(heads);
  const std::int64_t n = c.sequences * c.t_len * E;
  const auto in_block = [&](std::int64_t row) {  // a heads-first row of [sequences, T]
    const std::int64_t t = row % c.t_len;
    return first <= t && t < first + rows;
  };
  std::vector<bf16> q = draws(n, 1), k = draws(n, 2), v = draws(n, 3), dout = draws(n, 4);
  for (std::int64_t i = 0; i < n; ++i)
    if (!in_block(i / E)) dout[i] = bf16(0.0f);
  const naive_attention want{c, E, q, k, v, dout};
  const auto in_layout = [&](const auto& x, std::int64_t width) {
    return interleaved(x, c.t_len, heads, width);
  };
  const auto heads_first = [&](const auto& x, std::int64_t width) {
    return interleaved(x, c.t_len, heads, width, true);
  };
  const std::vector<bf16> lq = in_layout(q, E), lk = in_layout(k, E), lv = in_layout(v, E),
                          ldout = in_layout(dout, E);
  std::vector<bf16> out(n), dq(n), dk(n), dv(n);
  std::vector<float> lse(c.sequences * c.t_len, 0.0f),
      delta = in_layout(std::vector<float>(want.delta.begin(), want.delta.end()), 1);
  const std::int64_t skip = first * heads;  // rows before the block's first, in the arrays
  const tpx::kernels::attention_shape shape{{rows, heads, c.t_len}, {c.t_len, heads}, first};
  const flash::arguments args{shape,
                              1.0f / std::sqrt(float(E)),
                              lq.data() + skip * E,
                              lk.data(),
                              lv.data(),
                              out.data() + skip * E,
                              lse.data() + skip,
                              lse.data() + skip,
                              ldout.data() + skip * E,
                              delta.data() + skip,
                              dq.data() + skip * E,
                              dk.data(),
                              dv.data()};
  using Forward = flash::forward_tiling<E>;
  using Backward = flash::backward_tiling;
  const auto blocks = [](std::int64_t length, int block_rows) {
    return (length + block_rows - 1) / block_rows;
  };
  for (std::int64_t sq = 0; sq < c.sequences; ++sq) {
    for (std::int64_t b = 0; b < blocks(rows, Forward::block_rows); ++b) {
      simt_block forward(flash::warps, flash::forward_shared_bytes<E, Forward>);
      forward.run([&](auto& t) { flash::forward_block<E, Forward>(t, args, b, sq); });
    }
  }
  for (std::int64_t sq = 0; sq < c.sequences; ++sq) {  // the backward reads every row's lse
    for (std::int64_t b = 0; b < blocks(rows, Backward::block_rows); ++b) {
      simt_block dq_pass(flash::warps, flash::staged_bytes<E, Backward>);
      dq_pass.run([&](auto& t) { flash::dq_block<E, Backward>(t, args, b, sq); });
    }
    for (std::int64_t b = 0; b < blocks(c.t_len, Backward::block_rows); ++b) {
      simt_block dkdv_pass(flash::warps, flash::dkdv_shared_bytes<E, Backward>);
      dkdv_pass.run([&](auto& t) { flash::dkdv_block<E, Backward>(t, args, b, sq); });
    }
  }
  // The block's rows against the reference's, and the others untouched (still 0).
  const auto block_rows_of = [&](const auto& x, std::int64_t width, bool inside) {
    std::vector<typename std::decay_t<decltype(x)>::value_type> kept;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (in_block(static_cast<std::int64_t>(i) / width) == inside) kept.push_back(x[i]);
    return kept;
  };
  check_close("out", block_rows_of(heads_first(out, E), E, true), block_rows_of(want.out, E, true));
  check_close("dq", block_rows_of(heads_first(dq, E), E, true), block_rows_of(want.dq, E, true),
              block_rows_of(want.dq_terms, E, true));
  const std::vector<float> lse_rows = block_rows_of(heads_first(lse, 1), 1, true);
  const std::vector<double> lse_want = block_rows_of(want.lse, 1, true);
  for (std::size_t i = 0; i < lse_rows.size(); ++i)
    CHECK(lse_rows[i] == doctest::Approx(lse_want[i]).epsilon(1e-4));
  for (const auto* outside : {&out, &dq})
    for (const bf16 x : block_rows_of(heads_first(*outside, E), E, false))
      REQUIRE(float(x) == 0.0f);
  check_close("dk", heads_first(dk, E), want.dk, want.dk_terms);
  check_close("dv", heads_first(dv, E), want.dv);
}

// Blocks that start inside a key tile and end inside another, the first and the last of a
// sequence, one whose last query leaves key blocks unseen (their dk and dv 0), one of a single
// query, at every width, heads first and in [B, T, H, E].
TEST_CASE("tensor-core attention programs over a block of queries match naive attention") {
  check_query_block<64>({2, 130}, 37, 50);
  check_query_block<64>({1, 130}, 0, 65);
  check_query_block<64>({1, 130}, 65, 65);
  check_query_block<64>({1, 200}, 10, 20);
  check_query_block<32>({2, 100}, 99, 1);
  check_query_block<128>({1, 70}, 20, 35);
  check_query_block<64>({4, 130}, 64, 64, 2);
  check_query_block<32>({6, 100}, 30, 45, 3);
}

// Grouped-query attention (programs_case's group): groups of 2, 3 and 4 query heads, several
// tiles with a partial last one, heads first and read in place with 2 key heads per position.
TEST_CASE("tensor-core attention programs with grouped queries match repeated-key attention") {
  check_programs<64>({1, 130}, 1, 2);
  check_programs<32>({2, 100}, 1, 4);
  check_programs<64>({2, 70}, 2, 2);
  check_programs<128>({2, 70}, 2, 3);
}

}  // namespace

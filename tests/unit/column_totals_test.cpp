// The second pass of the GPU's column sums (kernels/column_totals.hpp), run on emulated blocks of
// 8 warps (tests/support/simt_block.hpp): out[c] += the sum over chunks of partial[chunk, c].
// Widths that end inside a block's 32 columns (1, 45, 768) and chunk counts below, at and
// between multiples of the 8 warps (1, 8, 13, 256). Small integers make every sum exact in fp32,
// so those results must be exact; normal draws are checked against a sum in double within
// 2.5e-6 of the sum of magnitudes (256 chunks summed 32 deep per warp, then 8 deep: 40 fp32
// roundings of 2^-24 at most). Under ThreadSanitizer the same runs check the shared sums for
// races between syncs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <tpx/kernels/column_totals.hpp>
#include <tpx/kernels/random.hpp>
#include <vector>

#include "../support/simt_block.hpp"

namespace {

namespace totals = tpx::kernels::column_totals;
using tpx::testing::simt_block;

// out after every block of the program has run, from out = `start`.
std::vector<float> run_blocks(std::int64_t d, std::int64_t chunks, const std::vector<float>& partial,
                              const std::vector<float>& start) {
  std::vector<float> out = start;
  for (std::int64_t b = 0; b < totals::blocks_for(d); ++b) {
    simt_block block(totals::slices, totals::shared_bytes);
    block.run([&](simt_block::thread_context& t) {
      totals::add_columns(t, b, d, chunks, partial.data(), out.data());
    });
  }
  return out;
}

TEST_CASE("column totals add every chunk's partial sum to each column, once") {
  for (std::int64_t d : {1, 45, 768}) {
    for (std::int64_t chunks : {1, 8, 13, 256}) {
      CAPTURE(d);
      CAPTURE(chunks);
      std::vector<float> partial(chunks * d), start(d);
      for (std::int64_t i = 0; i < chunks * d; ++i) partial[i] = static_cast<float>((i * 7) % 11) - 5.0f;
      for (std::int64_t c = 0; c < d; ++c) start[c] = static_cast<float>(c % 5);
      const std::vector<float> out = run_blocks(d, chunks, partial, start);
      int wrong = 0;
      for (std::int64_t c = 0; c < d; ++c) {
        double want = start[c];
        for (std::int64_t chunk = 0; chunk < chunks; ++chunk) want += partial[chunk * d + c];
        if (out[c] != want && ++wrong <= 3) FAIL_CHECK("column " << c << ": " << out[c] << ", want " << want);
      }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("column totals of normal draws agree with sums in double") {
  const std::int64_t d = 100, chunks = 256;
  std::vector<float> partial(chunks * d), start(d, 0.0f);
  for (std::int64_t i = 0; i < chunks * d; ++i)
    partial[i] = tpx::kernels::normal_at(5, static_cast<std::uint64_t>(i));
  const std::vector<float> out = run_blocks(d, chunks, partial, start);
  for (std::int64_t c = 0; c < d; ++c) {
    double want = 0, magnitude = 0;
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
      want += partial[chunk * d + c];
      magnitude += std::abs(partial[chunk * d + c]);
    }
    CHECK(std::abs(out[c] - want) <= 2.5e-6 * magnitude);
  }
}

}  // namespace

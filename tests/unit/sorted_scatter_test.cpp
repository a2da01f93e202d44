// The GPU's scatter-add of rows without atomics (kernels/sorted_scatter.hpp), its two passes run
// here for every piece and column, after a stable sort by destination as CUB's radix sort gives
// (std::sort by destination, then row; libstdc++ 12's std::stable_sort fails clang 19's -Werror):
// out[dest(r), c] += term(r, c) for the embedding tables' gradients.
//   - Small-integer terms make every sum exact in fp32, so the result must equal the reference
//     loop exactly, for batches of 1 to 1000 rows (within a piece of 64, at its edges, across many)
//     and destinations all alike, all distinct, few, many, skewed (40 % to one row, as a space
//     character takes a byte-level batch), and runs that end exactly where pieces end.
//   - Normal terms: within (k + 1) 2^-24 of the summed magnitudes of a sum in double (k the
//     destination's rows), and, where no destination's run crosses a piece, equal to the host's
//     loop (tensor/host_space.hpp) bit for bit.
//   - The same bits whatever order the pieces run in (forward, reversed, shuffled): every element
//     of out and of the partial rows is written by one (piece, column) of each pass, so the GPU's
//     scheduling cannot change a result.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <tpx/kernels/random.hpp>
#include <tpx/kernels/sorted_scatter.hpp>
#include <vector>

namespace {

namespace scatter = tpx::kernels::sorted_scatter;

struct batch {
  std::int64_t cols;
  std::vector<std::uint32_t> dest;  // per row
  std::vector<float> terms;         // [rows, cols]
  std::int64_t rows() const { return static_cast<std::int64_t>(dest.size()); }
};

struct term_at {
  const float* terms;
  std::int64_t cols;
  float operator()(std::int64_t r, std::int64_t c) const { return terms[r * cols + c]; }
};

enum class piece_order { forward, reversed, shuffled };

// The two passes over every (piece, column), pieces in `order`, onto out.
void run_passes(const batch& b, std::vector<float>& out, piece_order order) {
  const std::int64_t n = b.rows(), cols = b.cols, pieces = scatter::pieces_for(n);
  std::vector<std::uint32_t> source(static_cast<std::size_t>(n));
  std::iota(source.begin(), source.end(), 0u);
  std::sort(source.begin(), source.end(), [&](std::uint32_t a, std::uint32_t c) {
    return b.dest[a] != b.dest[c] ? b.dest[a] < b.dest[c] : a < c;
  });
  std::vector<std::uint32_t> dest(source.size());
  for (std::size_t j = 0; j < source.size(); ++j) dest[j] = b.dest[source[j]];
  std::vector<std::int64_t> visit(static_cast<std::size_t>(pieces));
  std::iota(visit.begin(), visit.end(), 0);
  if (order == piece_order::reversed) std::reverse(visit.begin(), visit.end());
  if (order == piece_order::shuffled) std::shuffle(visit.begin(), visit.end(), std::mt19937(7));
  // NaN where no pass writes, so that a read of an unwritten partial shows.
  std::vector<float> continued(static_cast<std::size_t>(pieces * cols), std::nanf(""));
  const term_at term{b.terms.data(), cols};
  for (std::int64_t p : visit)
    for (std::int64_t c = 0; c < cols; ++c)
      scatter::add_piece(p, c, n, cols, dest.data(), source.data(), term, out.data(),
                         continued.data());
  for (std::int64_t p : visit)
    for (std::int64_t c = 0; c < cols; ++c)
      scatter::join_piece(p, c, n, cols, dest.data(), continued.data(), out.data());
}

// host_space::scatter_add_rows's loop: rows in order.
std::vector<float> host_loop(const batch& b, std::vector<float> out) {
  for (std::int64_t r = 0; r < b.rows(); ++r)
    for (std::int64_t c = 0; c < b.cols; ++c)
      out[b.dest[r] * b.cols + c] += b.terms[r * b.cols + c];
  return out;
}

// Destinations of n rows into out_rows, by kind.
std::vector<std::uint32_t> destinations(const std::string& kind, std::int64_t n,
                                        std::int64_t out_rows) {
  std::mt19937 random(static_cast<std::uint32_t>(n));
  std::vector<std::uint32_t> d(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r) {
    const auto any = static_cast<std::uint32_t>(random() % out_rows);
    if (kind == "one")
      d[r] = static_cast<std::uint32_t>(out_rows - 1);
    else if (kind == "distinct")
      d[r] = static_cast<std::uint32_t>((r * 7919) % n);  // n <= out_rows
    else if (kind == "few")
      d[r] = any % 3;
    else if (kind == "many")
      d[r] = any;
    else if (kind == "skewed")
      d[r] = random() % 10 < 4 ? 32u : any;
    else
      d[r] = static_cast<std::uint32_t>(r / scatter::piece_entries);  // "aligned": a run per piece
  }
  return d;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](float x, float y) {
    return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y);
  });
}

// check(kind, b, start) for batches of every kind and size into 1000 rows of `cols`, with terms
// term(i) and out's starting elements start(i).
template <class Term, class Start, class Check>
void for_each_batch(std::int64_t cols, Term term, Start start_at, Check check) {
  const std::int64_t out_rows = 1000;
  for (const std::string kind : {"one", "distinct", "few", "many", "skewed", "aligned"}) {
    for (std::int64_t n : {1, 63, 64, 65, 130, 1000}) {
      CAPTURE(kind);
      CAPTURE(n);
      batch b{cols, destinations(kind, n, out_rows), {}};
      for (std::int64_t i = 0; i < n * cols; ++i) b.terms.push_back(term(i));
      std::vector<float> start(static_cast<std::size_t>(out_rows * cols));
      for (std::size_t i = 0; i < start.size(); ++i) start[i] = start_at(i);
      check(kind, b, start);
    }
  }
}

TEST_CASE("sorted scatter sums small integers exactly, whatever the destinations") {
  const auto small = [](std::int64_t i) { return static_cast<float>((i * 13) % 17) - 8.0f; };
  const auto start_at = [](std::size_t i) { return static_cast<float>(i % 4); };
  for_each_batch(5, small, start_at,
                 [](const std::string&, const batch& b, const std::vector<float>& start) {
                   std::vector<float> out = start;
                   run_passes(b, out, piece_order::forward);
                   const std::vector<float> want =
                       host_loop(b, start);  // exact: every partial sum is an integer
                   int wrong = 0;
                   for (std::size_t i = 0; i < out.size(); ++i)
                     if (out[i] != want[i] && ++wrong <= 3)
                       FAIL_CHECK("element " << i << ": " << out[i] << ", want " << want[i]);
                   CHECK(wrong == 0);
                 });
}

TEST_CASE(
    "sorted scatter of normal terms: close to double sums, the same bits in any piece order") {
  const auto normal = [](std::int64_t i) {
    return tpx::kernels::normal_at(3, static_cast<std::uint64_t>(i));
  };
  const auto start_at = [](std::size_t i) { return tpx::kernels::normal_at(4, i); };
  for_each_batch(
      7, normal, start_at,
      [](const std::string& kind, const batch& b, const std::vector<float>& start) {
        const std::int64_t cols = b.cols;
        std::vector<double> want(start.begin(), start.end()), magnitude(start.size());
        std::vector<std::int64_t> count(start.size() / cols);
        for (std::size_t i = 0; i < start.size(); ++i) magnitude[i] = std::abs(start[i]);
        for (std::int64_t r = 0; r < b.rows(); ++r) {
          ++count[b.dest[r]];
          for (std::int64_t c = 0; c < cols; ++c) {
            want[b.dest[r] * cols + c] += b.terms[r * cols + c];
            magnitude[b.dest[r] * cols + c] += std::abs(b.terms[r * cols + c]);
          }
        }
        std::vector<float> out = start;
        run_passes(b, out, piece_order::forward);
        int wrong = 0;
        for (std::size_t i = 0; i < out.size(); ++i) {
          const double bound =
              static_cast<double>(count[i / cols] + 1) * std::ldexp(1.0, -24) * magnitude[i];
          if (std::abs(out[i] - want[i]) > bound && ++wrong <= 3)
            FAIL_CHECK("element " << i << ": " << out[i] << ", want " << want[i] << " within "
                                  << bound);
        }
        CHECK(wrong == 0);
        for (piece_order order : {piece_order::reversed, piece_order::shuffled}) {
          std::vector<float> again = start;
          run_passes(b, again, order);
          CHECK(same_bits(again, out));
        }
        // No destination's run crosses a piece: the host loop's order of additions.
        if (kind == "distinct" || kind == "aligned" || b.rows() <= scatter::piece_entries)
          CHECK(same_bits(host_loop(b, start), out));
      });
}

}  // namespace

// The GPU's scatter-add of rows without atomics: out[dest(r), c] += term(r, c) for every row r
// of a batch (the embedding tables' gradients, nn/embedding.hpp), summed in an order fixed by the
// data, so that the result does not depend on scheduling and a GPU run repeats to the bit.
//
// The rows are first sorted by destination, stably (cuda/kernels/scatter_rows.hpp: CUB's radix
// sort of (dest, r) pairs), so each destination's rows form a run of entries in ascending r. The
// sorted list is cut into pieces of piece_entries entries, and two passes add the runs:
//   add_piece    per piece and column: each run within the piece, in entry order. A run that
//                begins in the piece adds onto out's value and writes it back (the piece owns
//                that destination); a run that began in an earlier piece writes its part to
//                continued[piece, c] instead.
//   join_piece   per piece and column: if the piece's last run began in it and goes on past its
//                end, adds the parts the following pieces wrote to continued, in piece order.
// Every element of out is written by one (piece, column) of each pass, so neither pass races. A
// run within one piece is summed as the host's loop over rows sums it (out, then each row in
// order): where no run crosses a piece, the device's bits are the host's.
//
// Why not fp32 atomics (what this replaced): their order, so the last bits of the tables'
// gradients, varied from run to run, and a byte-level vocabulary sends a whole batch into 256
// rows, many thousands of atomics on each address. Pieces bound the work of any one thread
// whatever the distribution of tokens: one destination taking every row is split over all pieces
// and joined by one thread per column adding a partial sum per piece.
#pragma once

#include <cstdint>

#include "tpx/core/config.hpp"

namespace tpx::kernels::sorted_scatter {

inline constexpr std::int64_t piece_entries = 64;

TPX_HOST_DEVICE inline std::int64_t pieces_for(std::int64_t entries) {
  return (entries + piece_entries - 1) / piece_entries;
}

// Pass 1 for column c of piece p: entries [p P, min(n, (p + 1) P)) of the sorted list, dest[j]
// the destination row of entry j and source[j] the row its term is read from.
template <class Term>
TPX_HOST_DEVICE void add_piece(std::int64_t p, std::int64_t c, std::int64_t n, std::int64_t cols,
                               const std::uint32_t* dest, const std::uint32_t* source,
                               const Term& term, float* out, float* continued) {
  const std::int64_t begin = p * piece_entries;
  const std::int64_t end = begin + piece_entries < n ? begin + piece_entries : n;
  for (std::int64_t j = begin; j < end;) {
    const std::uint32_t d = dest[j];
    const bool began_earlier = j == begin && begin > 0 && dest[begin - 1] == d;
    float* target =
        began_earlier ? continued + p * cols + c : out + static_cast<std::int64_t>(d) * cols + c;
    float sum = began_earlier ? 0.0f : *target;
    std::int64_t run_end = j + 1;
    while (run_end < end && dest[run_end] == d) ++run_end;
    // Four terms loaded before any is added, so that a GPU thread waits for one memory latency
    // per four rows, not per row; the additions keep the rows' order.
    for (; j + 4 <= run_end; j += 4) {
      const float t0 = term(static_cast<std::int64_t>(source[j]), c);
      const float t1 = term(static_cast<std::int64_t>(source[j + 1]), c);
      const float t2 = term(static_cast<std::int64_t>(source[j + 2]), c);
      const float t3 = term(static_cast<std::int64_t>(source[j + 3]), c);
      sum += t0;
      sum += t1;
      sum += t2;
      sum += t3;
    }
    for (; j < run_end; ++j) sum += term(static_cast<std::int64_t>(source[j]), c);
    *target = sum;
  }
}

// Pass 2 for column c of piece p, once every piece has run pass 1.
TPX_HOST_DEVICE inline void join_piece(std::int64_t p, std::int64_t c, std::int64_t n,
                                       std::int64_t cols, const std::uint32_t* dest,
                                       const float* continued, float* out) {
  const std::int64_t begin = p * piece_entries, end = begin + piece_entries;
  if (end >= n) return;
  const std::uint32_t d = dest[end - 1];
  if (dest[end] != d) return;  // the last run ends with the piece
  if (begin > 0 && dest[begin - 1] == d)
    return;  // it began earlier: the piece it began in joins it
  float* target = out + static_cast<std::int64_t>(d) * cols + c;
  float sum = *target;
  for (std::int64_t q = p + 1;; ++q) {
    sum += continued[q * cols + c];
    const std::int64_t next = (q + 1) * piece_entries;
    if (next >= n || dest[next] != d) break;
  }
  *target = sum;
}

}  // namespace tpx::kernels::sorted_scatter

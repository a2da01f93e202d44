// fold_ranks: the reduction every host-side communicator applies, in one place, so that the
// thread backend and the MPI backend give the same bits.
//
// A collective that reduces (reduce_scatter, all_reduce) ends with each rank holding one block of
// every rank's input, next to each other in memory (MPI) or behind the peers' published pointers
// (threads). fold_ranks combines those blocks element by element with a reducer of
// kernels/reduction.hpp (sum_reducer or max_reducer, over compute_t<T>, fp32), over the ranks in
// group-rank order, starting from rank 0's element (not the reducer's identity, so a sum of -0s
// stays -0), and rounds once to T. Same order, same rounding: the same result on every backend,
// equal to a sequential fp32 sum.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>

#include "tpx/core/bfloat16.hpp"

namespace tpx::detail {

// to[i] = the fold with R over ranks 0..ranks-1 of input_of(rank)[i], for i < n; input_of(rank)
// returns a const T* to that rank's block. Tiles keep the accumulators in cache; a full tile has
// a constant length, so that its loops vectorise even at -O2.
template <class R, class T, class InputOf>
void fold_ranks(int ranks, InputOf input_of, std::size_t n, T* to) {
  using Acc = typename R::value_type;
  constexpr std::size_t tile = 512;
  std::array<Acc, tile> acc;
  const auto reduce_tile = [&](std::size_t begin, auto length) {
    const T* first = input_of(0) + begin;
    for (std::size_t i = 0; i < length; ++i) acc[i] = R::element(static_cast<float>(first[i]));
    for (int s = 1; s < ranks; ++s) {
      const T* from = input_of(s) + begin;
      for (std::size_t i = 0; i < length; ++i)
        acc[i] = R::combine(acc[i], R::element(static_cast<float>(from[i])));
    }
    for (std::size_t i = 0; i < length; ++i) to[begin + i] = static_cast<T>(acc[i]);
  };
  std::size_t begin = 0;
  for (; n - begin >= tile; begin += tile) {
    reduce_tile(begin, std::integral_constant<std::size_t, tile>{});
  }
  if (begin < n) reduce_tile(begin, n - begin);
}

}  // namespace tpx::detail

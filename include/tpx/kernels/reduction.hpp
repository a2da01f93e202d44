// Reductions over a range of values: sum, sum of squares and maximum.
//
// A reducer says what each element contributes (element), how two partial results combine
// (combine) and what an empty range yields (identity), in an accumulator type Acc that the caller
// picks. That is all a reduction needs to be split any way at all: a serial loop, a CUDA block
// tree, or shards on different ranks followed by an all-reduce; all members are TPX_HOST_DEVICE.
// reduce() is the serial loop, callable from host and device code (one thread, one range).
//
// Inside kernels (the per-row loss and norm functions) tpx accumulates in fp32, as the GPU does.
// The host helpers sum() and sum_of_squares() accumulate in double instead: a serial
// fp32 sum loses up to n * 2^-24 relative, while a double one returns (nearly) the exactly
// rounded fp32 result, whatever n is and however the range is split across ranks. So the host
// result is the reference the GPU's tree reductions are checked against, and a sharded sum equals
// the unsharded one up to the final rounding. The cost is irrelevant: these loops are
// memory-bound.
#pragma once

#include <math.h>  // INFINITY

#include <cstdint>

#include "tpx/core/bfloat16.hpp"
#include "tpx/core/config.hpp"

namespace tpx::kernels {

// Sum of the elements; empty range: 0.
template <class Acc = float>
struct sum_reducer {
  using value_type = Acc;
  TPX_HOST_DEVICE static constexpr Acc identity() { return Acc(0); }
  TPX_HOST_DEVICE static constexpr Acc element(float x) { return Acc(x); }
  TPX_HOST_DEVICE static constexpr Acc combine(Acc a, Acc b) { return a + b; }
};

// Sum of the squared elements (each square formed in Acc); empty range: 0.
template <class Acc = float>
struct sum_of_squares_reducer {
  using value_type = Acc;
  TPX_HOST_DEVICE static constexpr Acc identity() { return Acc(0); }
  TPX_HOST_DEVICE static constexpr Acc element(float x) { return Acc(x) * Acc(x); }
  TPX_HOST_DEVICE static constexpr Acc combine(Acc a, Acc b) { return a + b; }
};

// Largest element; empty range: -infinity. A NaN anywhere makes the result NaN.
template <class Acc = float>
struct max_reducer {
  using value_type = Acc;
  TPX_HOST_DEVICE static constexpr Acc identity() { return Acc(-INFINITY); }
  TPX_HOST_DEVICE static constexpr Acc element(float x) { return Acc(x); }
  // `|`, not `||`: no branch, so Clang's host loops over it vectorize. GCC's do not (it makes
  // the NaN test a branch); tensor/host_causal_softmax.hpp folds a row's maximum with a select
  // GCC vectorizes, where a NaN needs no carrying.
  TPX_HOST_DEVICE static constexpr Acc combine(Acc a, Acc b) {
    return ((a > b) | (a != a)) ? a : b;
  }
};

// Folds x[0, n) with the reducer R, in order, accumulating in R::value_type.
template <class R, class T>
TPX_HOST_DEVICE typename R::value_type reduce(std::int64_t n, const T* x, R r) {
  typename R::value_type acc = r.identity();
  for (std::int64_t i = 0; i < n; ++i) acc = r.combine(acc, r.element(static_cast<compute_t<T>>(x[i])));
  return acc;
}

// Host helpers returning float. The sums accumulate in double (see the top of the file); the
// maximum is exact in any type.
template <class T>
float sum(std::int64_t n, const T* x) {
  return static_cast<float>(reduce(n, x, sum_reducer<double>{}));
}

template <class T>
float sum_of_squares(std::int64_t n, const T* x) {
  return static_cast<float>(reduce(n, x, sum_of_squares_reducer<double>{}));
}

template <class T>
float maximum(std::int64_t n, const T* x) {
  return reduce(n, x, max_reducer<float>{});
}

}  // namespace tpx::kernels

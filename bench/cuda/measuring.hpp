// What the measurements of tpx-bench-cuda share (gemm.cu, kernels.cu, attention.cu): the mean
// time of back-to-back calls by CUDA events, device arrays of random inputs, and the relative
// difference of a result from its reference. Included by the nvcc-compiled files only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/kernels/random.hpp"
#include "tpx/cuda/rank_resources.hpp"
#include "tpx/cuda/stream.hpp"

namespace tpx::bench::cuda {

// Mean seconds per call of `iters` calls of fn on `stream`, by CUDA events around them all.
template <class Fn>
double time_calls(cudaStream_t stream, int iters, Fn&& fn) {
  tpx::cuda::event start(true), stop(true);
  start.record(stream);
  for (int i = 0; i < iters; ++i) fn();
  stop.record(stream);
  stop.synchronize();
  return elapsed_ms(start, stop) / 1e3 / iters;
}

// The same after `warmup` untimed calls.
template <class Fn>
double seconds_per_call(cudaStream_t stream, int iters, int warmup, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  return time_calls(stream, iters, fn);
}

// n elements drawn from N(0, 1) by tpx's seeded device generator, on the rank's stream.
template <class T>
tpx::cuda::device_buffer<T> random_buffer(tpx::cuda::rank_resources& r, std::int64_t n,
                                          std::uint64_t seed) {
  tpx::cuda::device_buffer<T> b(static_cast<std::size_t>(n), r.pool(), r.stream());
  const std::array<std::int64_t, 1> shape{n}, origin{0};
  tpx::cuda::fill_normal(r.stream(), b.data(), shape, origin, shape, seed, 1.0f);
  return b;
}

// max |got - want| / max |want| over one array (the device's result against a reference).
template <class T>
double relative_difference(const std::vector<T>& got, const std::vector<T>& want) {
  double diff = 0, largest = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double w = static_cast<float>(want[i]);
    diff = std::max(diff, std::abs(static_cast<double>(static_cast<float>(got[i])) - w));
    largest = std::max(largest, std::abs(w));
  }
  return largest > 0 ? diff / largest : diff;
}

}  // namespace tpx::bench::cuda

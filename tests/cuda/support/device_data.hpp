// What the CUDA tests share: moving vectors to and from the device on a rank's stream, seeded
// random inputs, and the comparison of a device result with its host reference in units of
// the fp32 (or bf16) rounding.
//
// Every device result is checked against the host backend run on the same inputs, so a check
// states how far apart the two may be: within `ulps` units of roundoff of the larger magnitude
// (plus `floor`, for results near zero where relative error means nothing). The tolerances sit
// beside each check with the reason for them.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tpx/core/bfloat16.hpp"
#include "tpx/cuda/device_buffer.hpp"
#include "tpx/cuda/rank_resources.hpp"

namespace tpx::cuda::testing {

constexpr double fp32_unit = 0x1.0p-24;  // fp32 unit roundoff
constexpr double bf16_unit = 0x1.0p-8;   // bf16 unit roundoff

template <class T>
device_buffer<T> to_device(rank_resources& r, const std::vector<T>& host) {
  device_buffer<T> d(host.size(), r.pool(), r.stream());
  if (!host.empty())
    TPX_CUDA_CHECK(cudaMemcpyAsync(d.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, r.stream()));
  r.synchronize();
  return d;
}

template <class T>
std::vector<T> to_host(rank_resources& r, const T* device, std::size_t n) {
  std::vector<T> host(n);
  if (n != 0) TPX_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost, r.stream()));
  r.synchronize();
  return host;
}
template <class T>
std::vector<T> to_host(rank_resources& r, const device_buffer<T>& device) {
  return to_host(r, device.data(), device.size());
}

// n values uniform in [lo, hi), rounded to T.
template <class T>
std::vector<T> random_values(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(rng));
  return v;
}

// How many elements of `got` differ from `want` by more than ulps * unit * max(|got|, |want|)
// + floor; NaN matches NaN only, an infinity the same infinity only. Reports the first mismatch.
template <class A, class B>
std::int64_t mismatches(const std::vector<A>& got, const std::vector<B>& want, double ulps, double unit,
                        double floor = 0.0) {
  REQUIRE(got.size() == want.size());
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<float>(got[i]), w = static_cast<float>(want[i]);
    const bool ok = std::isnan(g) || std::isnan(w) ? std::isnan(g) && std::isnan(w)
                    : g == w                       ? true  // equal infinities too
                                                   : std::abs(g - w) <= ulps * unit * std::max(std::abs(g), std::abs(w)) + floor;
    if (!ok && bad++ == 0) MESSAGE("first mismatch at " << i << ": device " << g << ", host " << w);
  }
  return bad;
}

}  // namespace tpx::cuda::testing

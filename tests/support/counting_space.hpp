// counting_space: a stand-in for a GPU's memory space that runs on any machine. Its memory is
// host memory and its functions are host_space's (so its results are the host backend's, bit for
// bit), but tpx treats it as a device (device_like_space.hpp: Tensor::local() does not compile
// for its tensors, and layers take the device's paths), and every crossing to or from host
// memory goes through to_host / from_host, which count the bytes, per rank thread. Code that runs
// clean here stages nothing on a real GPU either, since the device space offers the same
// interface and nothing more.
#pragma once

#include <algorithm>
#include <cstddef>

#include "device_like_space.hpp"

namespace tpx::testing {

struct counting_space : device_like_space {
  // The bytes this thread (one rank) copied each way since the last reset().
  struct traffic {
    std::size_t to_host = 0;
    std::size_t from_host = 0;
  };
  static traffic& counted() {
    thread_local traffic t;
    return t;
  }
  static void reset() { counted() = {}; }

  template <class T>
  static void to_host(const rank_context&, const T* src, std::size_t n, T* dst) {
    counted().to_host += n * sizeof(T);
    std::copy_n(src, n, dst);
  }
  template <class T>
  static void from_host(const rank_context&, const T* src, std::size_t n, T* dst) {
    counted().from_host += n * sizeof(T);
    std::copy_n(src, n, dst);
  }
};

}  // namespace tpx::testing

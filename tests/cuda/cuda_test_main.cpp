// The main of every CUDA test executable: count the GPUs first, and run the doctest cases only
// when there are enough.
//
// With fewer GPUs than the test needs (--tpx-min-devices=k, given by tpx_add_cuda_test; 1 by
// default), it prints "skipped: no CUDA device (<the runtime's reason>)" or "skipped: needs k
// CUDA devices, found n" and exits with status 77, which CTest records as skipped
// (SKIP_RETURN_CODE), so a machine without a GPU never reports a CUDA test as passed. Every
// other argument goes to doctest. Compiled by the host compiler: it only asks the CUDA runtime
// how many devices there are.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "tpx/cuda/device.hpp"

namespace {
constexpr int skipped = 77;
}

int main(int argc, char** argv) {
  int needed = 1;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--tpx-min-devices="))
      needed = std::stoi(std::string(arg.substr(arg.find('=') + 1)));
    else
      args.push_back(argv[i]);
  }
  const tpx::cuda::device_census devices = tpx::cuda::find_devices();
  if (devices.count == 0) {
    std::printf("skipped: no CUDA device (%s)\n", devices.reason.c_str());
    return skipped;
  }
  if (devices.count < needed) {
    std::printf("skipped: needs %d CUDA devices, found %d\n", needed, devices.count);
    return skipped;
  }
  doctest::Context context(static_cast<int>(args.size()), args.data());
  return context.run() == 0 ? 0 : 1;
}

// tpx-bench-roofline: the host GEMM's FLOP/s over shapes of rising arithmetic intensity, against
// this machine's roofline (seed 001: performance <= min(peak, I * bandwidth)).
//
//   tpx-bench-roofline -n 5 --json roofline.json
//
// The roofline is measured by the bench itself, on one thread as tpx's ranks run: the peak is
// the best FLOP/s any of the shapes reached, the bandwidth is a 256 MiB memcpy counted as reads
// plus writes (2 bytes of traffic per byte copied). Each shape m x k x n runs tpx::kernels::gemm in
// fp32 (best of -n after -w); its arithmetic intensity is I = 2mkn / (4 (mk + kn + mn)) FLOP per
// byte, each matrix moved once, and "of roof" is the measured FLOP/s over min(peak, I * bw).
// Square shapes sweep I upwards; shapes with few rows times a 4096 x 4096 matrix (64 MiB, more
// than the last-level cache; m = 1 is a matrix-vector product) are the memory-bound end.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <tpx/tpx.hpp>
#include <vector>

#include "support/page_vector.hpp"
#include "support/report.hpp"

namespace {

using tpx::bench::clock;
using tpx::bench::samples;
using tpx::bench::seconds_since;

struct shape {
  std::int64_t m, k, n;
};

// Best seconds of fn over iters calls after warmup.
template <class Fn>
double best_time(int warmup, int iters, Fn&& fn) {
  samples t;
  for (int i = 0; i < warmup + iters; ++i) {
    const auto start = clock::now();
    fn();
    if (i >= warmup) t.seconds.push_back(seconds_since(start));
  }
  return t.best();
}

double gemm_seconds(shape s, int warmup, int iters) {
  std::vector<float> a(s.m * s.k, 1.0f), b(s.k * s.n, 1.0f), c(s.m * s.n);
  return best_time(warmup, iters, [&] {
    tpx::kernels::gemm(false, false, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.n, 0.0f,
                       c.data(), s.n);
  });
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 5, warmup = 1;
  std::string json;
  CLI::App app{"tpx-bench-roofline: host GEMM FLOP/s against this machine's roofline"};
  app.add_option("-n,--iters", iters, "timed calls per shape (best)")->check(CLI::Range(1, 1000));
  app.add_option("-w,--warmup_iters", warmup, "untimed calls first")->check(CLI::Range(0, 1000));
  app.add_option("--json", json, "write every row to this file as JSON");
  std::int64_t largest = 2048;
  app.add_option("-e,--largest", largest, "largest square size")->check(CLI::Range(16, 1 << 14));
  CLI11_PARSE(app, argc, argv);

  try {
    tpx::kernels::set_blas_threads(1);
    std::vector<shape> shapes;
    for (std::int64_t s = 16; s <= largest; s *= 2) shapes.push_back({s, s, s});
    for (std::int64_t m : {1, 4, 16, 64, 256}) shapes.push_back({m, 4096, 4096});
    std::vector<double> rates;
    for (const shape& s : shapes)
      rates.push_back(2.0 * s.m * s.k * s.n / gemm_seconds(s, warmup, iters));
    const double peak = *std::ranges::max_element(rates);
    const std::size_t copy_bytes = 256 << 20;
    tpx::bench::page_vector<char> from(copy_bytes, 1), to(copy_bytes, 2);
    const double bandwidth = 2.0 * copy_bytes / best_time(warmup, iters, [&] {
                               std::memcpy(to.data(), from.data(), copy_bytes);
                               asm volatile("" : : "r"(to.data()) : "memory");
                             });
    std::printf("# tpx-bench-roofline: fp32 sgemm on one thread (load average %.2f)\n",
                tpx::bench::load_average());
    std::printf(
        "# roofline: peak %.2f GFLOP/s (the best shape below), memory %.2f GB/s (memcpy "
        "256 MiB, reads + writes); ridge at I = %.2f FLOP/B\n",
        peak / 1e9, bandwidth / 1e9, peak / bandwidth);
    std::printf("# %6s %6s %6s %10s %10s %10s %8s\n", "m", "k", "n", "I (F/B)", "GFLOP/s", "roof",
                "of roof");

    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const shape& s = shapes[i];
      const double flop = 2.0 * s.m * s.k * s.n;
      const double intensity = flop / (4.0 * (s.m * s.k + s.k * s.n + s.m * s.n));
      const double rate = rates[i];
      const double roof = std::min(peak, intensity * bandwidth);
      std::printf("  %6lld %6lld %6lld %10.2f %10.2f %10.2f %8.2f\n", static_cast<long long>(s.m),
                  static_cast<long long>(s.k), static_cast<long long>(s.n), intensity, rate / 1e9,
                  roof / 1e9, rate / roof);
      rows.push_back({{"m", s.m},
                      {"k", s.k},
                      {"n", s.n},
                      {"intensity", intensity},
                      {"gflops", rate / 1e9},
                      {"roof_gflops", roof / 1e9},
                      {"of_roof", rate / roof}});
    }
    if (!json.empty())
      tpx::bench::write_json(
          json, "roofline", tpx::bench::command_line(argc, argv),
          {{"peak_gflops", peak / 1e9}, {"memory_gbps", bandwidth / 1e9}, {"iters", iters}},
          std::move(rows));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpx-bench-roofline: %s\n", e.what());
    return 2;
  }
}

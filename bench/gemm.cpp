// tpx-bench-gemm: what tpx's local GEMM costs against calling CBLAS directly.
//
//   tpx-bench-gemm -b 256 -e 2048 -f 2 -n 10 -w 2 --json gemm.json
//
// For each size m = n = k, three ways of computing C = A B in fp32 with single-threaded
// OpenBLAS, on the one rank of a 1x1 mesh (tpx::spmd keeps BLAS at one thread per rank):
//   cblas_sgemm          the direct call, into a preallocated C
//   tpx::kernels::gemm   the host kernel every tpx matmul ends in (argument checks, then sgemm)
//   tpx::matmul          the typed path, Tensor<float, M, K> * Tensor<float, K, N>: plans at
//                        compile time, allocates a zero-filled result tensor, calls the kernel
// The three are timed call by call, interleaved (rounds of one call of each, each round
// starting with the next variant; -w untimed rounds, then -n timed), so that clock drift,
// other load and cache state fall on all of them alike. The table gives
// the best and the median time, GFLOP/s = 2mnk / t, and each variant's ratio to the direct call
// (>= 0.95 is the target at 1024^3: "within 5%"). max|diff| is the largest difference of the
// variant's C from the direct call's (0 when they run the same sgemm). For tpx::matmul the
// column alloc gives the median time of constructing the result tensor alone (a zero-filled
// std::vector of m*n floats), the part of its overhead that is not the kernel's.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <tpx/tpx.hpp>
#include <vector>

#include "support/report.hpp"
#include "support/sizes.hpp"

namespace {

TPX_MESH_AXES(X);
TPX_DIMS(M, K, N);

using tpx::bench::clock;
using tpx::bench::samples;
using tpx::bench::seconds_since;

struct options {
  std::int64_t min = 256, max = 2048;
  double factor = 2;
  int iters = 10, warmup = 2;
  std::string json;
};

float max_diff(const float* a, const float* b, std::size_t n) {
  float d = 0;
  for (std::size_t i = 0; i < n; ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

template <class Fn>
double time_once(Fn&& fn) {
  const auto start = clock::now();
  fn();
  return seconds_since(start);
}

// Times the three variants at m = n = k = size on this rank; appends one row per variant.
template <class Rank>
void measure(Rank& rank, std::int64_t size, const options& o, nlohmann::json& rows) {
  const std::int64_t m = size, n = size, k = size;
  const auto a = tpx::randn<float, M<>, K<>>(rank, {M(m), K(k)}, 1);
  const auto b = tpx::randn<float, K<>, N<>>(rank, {K(k), N(n)}, 2);
  std::vector<float> c_direct(static_cast<std::size_t>(m * n)), c_kernel(c_direct.size());

  const auto direct = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a.data(), static_cast<int>(k), b.data(),
                static_cast<int>(n), 0.0f, c_direct.data(), static_cast<int>(n));
  };
  const auto kernel = [&] {
    tpx::kernels::gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c_kernel.data(),
                       n);
  };
  // The typed path's cost includes making and freeing its result.
  const auto typed = [&] { (void)tpx::matmul(a, b); };
  const auto alloc = [&] {
    return time_once([&] { (void)tpx::zeros<float, M<>, N<>>(rank, {M(m), N(n)}); });
  };

  samples t_direct, t_kernel, t_typed, t_alloc;
  const std::function<void()> variants[] = {direct, kernel, typed};
  samples* times[] = {&t_direct, &t_kernel, &t_typed};
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    for (int v = 0; v < 3; ++v) {  // each round starts with the next variant
      const int which = (i + v) % 3;
      const double t = time_once(variants[which]);
      if (i >= o.warmup) times[which]->seconds.push_back(t);
    }
    const double t = alloc();
    if (i >= o.warmup) t_alloc.seconds.push_back(t);
  }
  const auto c_typed = tpx::matmul(a, b);

  const double flop = 2.0 * m * n * k;
  const auto row = [&](const char* variant, const samples& t, float diff) {
    const double ratio_best = t_direct.best() / t.best();
    const double ratio_median = t_direct.median() / t.median();
    std::printf("  %6lld %6lld %6lld  %-19s %9.3f %9.3f %9.2f %9.2f %7.3f %7.3f %9.2g",
                static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                variant, t.best() * 1e3, t.median() * 1e3, flop / t.best() / 1e9,
                flop / t.median() / 1e9, ratio_best, ratio_median, static_cast<double>(diff));
    nlohmann::json r = {{"variant", variant},
                        {"m", m},
                        {"n", n},
                        {"k", k},
                        {"best_ms", t.best() * 1e3},
                        {"median_ms", t.median() * 1e3},
                        {"best_gflops", flop / t.best() / 1e9},
                        {"median_gflops", flop / t.median() / 1e9},
                        {"ratio_best", ratio_best},
                        {"ratio_median", ratio_median},
                        {"max_diff", diff}};
    if (&t == &t_typed) {
      std::printf(" %9.3f", t_alloc.median() * 1e3);
      r["alloc_median_ms"] = t_alloc.median() * 1e3;
    }
    std::printf("\n");
    rows.push_back(std::move(r));
  };
  row("cblas_sgemm", t_direct, 0.0f);
  row("tpx::kernels::gemm", t_kernel, max_diff(c_kernel.data(), c_direct.data(), c_direct.size()));
  row("tpx::matmul", t_typed, max_diff(c_typed.data(), c_direct.data(), c_direct.size()));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"tpx-bench-gemm: tpx's local GEMM against a direct cblas_sgemm"};
  app.add_option("-b,--min", o.min, "smallest m = n = k")->check(CLI::Range(1, 1 << 16));
  app.add_option("-e,--max", o.max, "largest m = n = k")->check(CLI::Range(1, 1 << 16));
  app.add_option("-f,--stepfactor", o.factor, "multiply the size by this each step")
      ->check(CLI::Range(1.0001, 1e9));
  app.add_option("-n,--iters", o.iters, "timed calls of each variant")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-w,--warmup_iters", o.warmup, "untimed calls first")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--json", o.json, "write every row to this file as JSON");
  CLI11_PARSE(app, argc, argv);

  try {
    const std::vector<std::int64_t> sizes = tpx::bench::size_sweep(o.min, o.max, o.factor);
    nlohmann::json rows = nlohmann::json::array();
    std::printf(
        "# tpx-bench-gemm: fp32, single-threaded OpenBLAS, m = n = k, %d timed calls "
        "each after %d warm-up (load average %.2f)\n",
        o.iters, o.warmup, tpx::bench::load_average());
    std::printf("# %6s %6s %6s  %-19s %9s %9s %9s %9s %7s %7s %9s %9s\n", "m", "n", "k", "variant",
                "best", "median", "best", "median", "ratio", "ratio", "max|diff|", "alloc");
    std::printf("# %6s %6s %6s  %-19s %9s %9s %9s %9s %7s %7s %9s %9s\n", "", "", "", "", "(ms)",
                "(ms)", "(GF/s)", "(GF/s)", "(best)", "(med)", "", "(ms)");
    tpx::spmd(tpx::host, tpx::Mesh<X>{1}, [&](auto& rank) {
      for (std::int64_t size : sizes) measure(rank, size, o, rows);
    });
    if (!o.json.empty())
      tpx::bench::write_json(o.json, "gemm", tpx::bench::command_line(argc, argv),
                             {{"iters", o.iters}, {"warmup", o.warmup}, {"blas_threads", 1}},
                             std::move(rows));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpx-bench-gemm: %s\n", e.what());
    return 2;
  }
}

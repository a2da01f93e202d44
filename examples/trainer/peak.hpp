// The peak the example trainers' MFU column divides by, when --peak-gflops does not give one:
// the matrix-multiply rate of every rank at once, measured on the ranks the run will use.
//
// Every rank multiplies two n x n matrices of the compute type (float, or bf16 with --bf16)
// `reps` times between two barriers; the peak is ranks * reps * 2 n^3 over rank 0's wall time
// between the barriers, so ranks that share cores (threads on the host, streams on one GPU)
// share the peak, as they share it in training. It is the rate tpx's own GEMM path reaches at
// this size (OpenBLAS on the host, cuBLASLt on a GPU), not a data-sheet figure: a run's MFU says
// how much of what this machine does for tpx the whole step keeps. The rate is the best of
// `trials` such timings, as benchmarks report a peak: one timing that another process or a
// clock not yet raised slowed would lower the peak, and lift every MFU of the run, past 100 %
// in short runs on a busy machine. The measurement takes about half a second on the host.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <tpx/nn/global_norm.hpp>
#include <tpx/tensor/staging.hpp>
#include <tpx/tpx.hpp>
#include <type_traits>

namespace trainer {
namespace peak_measure {
TPX_MESH_AXES(P);
TPX_DIMS(M, K, N);
}  // namespace peak_measure

// FLOP/s of all `ranks` ranks of launcher's backend together.
template <class Launcher>
double measured_peak_flops(Launcher launcher, int ranks, bool bf16) {
  using namespace peak_measure;
  constexpr std::int64_t n = 768;
  const int reps = std::max(1, 8 / ranks);
  constexpr int trials = 5;
  double flops = 0;
  // A failure here (out of memory, most often) says where it happened: mesh P is this one's.
  try {
    tpx::spmd(launcher, tpx::Mesh<peak_measure::P>{ranks}, [&](auto& rank) {
      using Space = tpx::space_of_t<decltype(rank)>;
      const auto measure = [&]<class T>(T*) {
        const tpx::BasicTensor<Space, T, M<>, K<>> a(rank, {M(n), K(n)});
        const tpx::BasicTensor<Space, T, K<>, N<>> b(rank, {K(n), N(n)});
        const auto finish = [&](const auto& c) {
          (void)tpx::scalar_on_host(tpx::nn::squared_norm(c));
        };
        finish(tpx::contract<K>(a, b));  // warm-up: BLAS buffers, cuBLASLt plan
        for (int trial = 0; trial < trials; ++trial) {
          rank.template group<peak_measure::P>().barrier();
          const auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < reps; ++i) finish(tpx::contract<K>(a, b));
          rank.template group<peak_measure::P>().barrier();
          const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start;
          if (rank.world_rank() == 0)
            flops = std::max(flops, 2.0 * n * n * n * reps * ranks / wall.count());
        }
      };
      if (bf16)
        measure(static_cast<tpx::bf16*>(nullptr));
      else
        measure(static_cast<float*>(nullptr));
    });
  } catch (const std::exception& e) {
    throw std::runtime_error(
        std::string("measuring the peak FLOP/s for the MFU column (--peak-gflops "
                    "skips it): ") +
        e.what());
  }
  return flops;
}

}  // namespace trainer

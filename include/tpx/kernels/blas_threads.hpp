// How many threads OpenBLAS may use for one call of the host GEMM (kernels/gemm_host.hpp).
//
// The host backend runs each rank of the mesh as a thread of one process, so with as many ranks as
// cores the parallelism is already there: every rank should run its BLAS calls on its own thread.
// Left alone, OpenBLAS (pthread build) starts one worker per core and has every rank's call
// compete for that one shared pool. set_blas_threads(1) makes each sgemm run entirely on the
// calling thread, so the ranks' GEMMs proceed side by side without sharing anything; with fewer
// ranks than cores, spmd (spmd/spmd.hpp) gives each call the cores the ranks leave idle.
//
// The setting is process-wide, not per thread (OpenBLAS keeps one global count): call it once
// from the main thread before the rank threads start, never while a BLAS call is running. The
// environment variable OPENBLAS_NUM_THREADS sets the same count at start-up.
//
// The two OpenBLAS entry points are declared here rather than taken from <cblas.h>: OpenBLAS's
// own cblas.h declares them (Debian's does), but a reference cblas.h found first on the include
// path would not. Redeclaring an identical extern "C" function is harmless, and linking against a
// BLAS other than OpenBLAS fails loudly at link time instead of ignoring the request.
#pragma once

#include <stdexcept>
#include <string>

extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace tpx::kernels {

// Sets the number of threads each OpenBLAS call may use (process-wide; see above). threads >= 1.
inline void set_blas_threads(int threads) {
  if (threads < 1) {
    throw std::invalid_argument("tpx: set_blas_threads: " + std::to_string(threads) + " threads; need at least 1");
  }
  openblas_set_num_threads(threads);
}

// The number of threads each OpenBLAS call currently may use.
inline int blas_threads() { return openblas_get_num_threads(); }

}  // namespace tpx::kernels

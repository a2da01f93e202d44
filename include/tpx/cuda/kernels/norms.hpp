// RMSNorm and LayerNorm over the rows of a row-major [rows, d] array, forward and backward, on
// the device: the pieces of kernels/rmsnorm.hpp and kernels/layernorm.hpp assembled in parallel.
//
//   rmsnorm_forward(stream, rows, d, x, w, eps, y, r)           y = rmsnorm(x) * w; r[row] saved
//   rmsnorm_backward(stream, pool, rows, d, x, w, r, dy, dx, dw)  dx; dw += (fp32)
//   layernorm_forward(stream, rows, d, x, w, b, eps, y, stats)   y = layernorm(x) * w + b
//   layernorm_backward(stream, pool, rows, d, x, w, stats, dy, dx, dw, db)
//
// Rows of up to 8192 columns are held in registers: a warp per row of up to 1024 columns (GPT-2's
// 768, the MLP benchmark's 1024), the block's 8 warps per row of up to 8192 (the block programs
// of kernels/rmsnorm_warp_rows.hpp and kernels/layernorm_warp_rows.hpp, checked on the host on an
// emulated block). The forwards read x once and write y; the backwards read x and dy once, write
// dx, and keep the parameter gradients' column sums in registers across a thread's rows, then add
// the blocks' sums in a second small pass. Wider rows take one block per row (rows.hpp): each
// thread adds up the per-element terms of its share of the row, cub::BlockReduce combines them,
// the row's statistic is finished by the same function the host row function calls, and the
// outputs follow element by element, rereading the row; the parameter gradients are column sums
// in a second, deterministic pass over x and dy. The host row functions sum serially and the
// device in trees, so results agree to a few ulps per reduction, not bit for bit. y may be x and
// dx may be dy (in place).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "tpx/cuda/check.hpp"
#include "tpx/cuda/kernels/launch.hpp"
#include "tpx/cuda/kernels/rows.hpp"
#include "tpx/cuda/kernels/warp_block.hpp"
#include "tpx/kernels/layernorm.hpp"
#include "tpx/kernels/layernorm_warp_rows.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/kernels/rmsnorm.hpp"
#include "tpx/kernels/rmsnorm_warp_rows.hpp"

namespace tpx::cuda {

namespace detail {

template <int W, class T, class Wt>
__global__ void __launch_bounds__(block_threads)
    rmsnorm_forward_kernel(std::int64_t rows, std::int64_t d, const T* x, const Wt* w, float eps, T* y, float* r_out) {
  __shared__ typename block_reduce<float>::TempStorage scratch;
  __shared__ float shared;
  using R = kernels::sum_of_squares_reducer<float>;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * d;
    float acc = R::identity();
    for_row_vectors<W>(d, [&](std::int64_t i) {
      float v[W];
      load_floats<W>(xr, i, v);
#pragma unroll
      for (int j = 0; j < W; ++j) acc = R::combine(acc, R::element(v[j]));
    });
    const float r = kernels::rmsnorm_inverse_rms(block_combine(scratch, shared, acc, plus{}), d, eps);
    for_row_vectors<W>(d, [&](std::int64_t i) {
      float v[W], wv[W];
      load_floats<W>(xr, i, v);
      load_floats<W>(w, i, wv);
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = kernels::rmsnorm_output(v[j], r, wv[j]);
      store_floats<W>(y + row * d, i, v);
    });
    if (threadIdx.x == 0 && r_out != nullptr) r_out[row] = r;
  }
}

template <int W, class T, class Wt>
__global__ void __launch_bounds__(block_threads)
    rmsnorm_backward_kernel(std::int64_t rows, std::int64_t d, const T* x, const Wt* w, const float* r_in, const T* dy,
                            T* dx) {
  __shared__ typename block_reduce<float>::TempStorage scratch;
  __shared__ float shared;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * d;
    const T* dyr = dy + row * d;
    const float r = r_in[row];
    float acc = 0.0f;
    for_row_vectors<W>(d, [&](std::int64_t i) {
      float xv[W], wv[W], gv[W];
      load_floats<W>(xr, i, xv);
      load_floats<W>(w, i, wv);
      load_floats<W>(dyr, i, gv);
#pragma unroll
      for (int j = 0; j < W; ++j) acc += kernels::rmsnorm_backward_term(xv[j], wv[j], gv[j]);
    });
    const float c = kernels::rmsnorm_backward_scale(block_combine(scratch, shared, acc, plus{}), r, d);
    for_row_vectors<W>(d, [&](std::int64_t i) {
      float xv[W], wv[W], gv[W];
      load_floats<W>(xr, i, xv);
      load_floats<W>(w, i, wv);
      load_floats<W>(dyr, i, gv);
#pragma unroll
      for (int j = 0; j < W; ++j) xv[j] = kernels::rmsnorm_input_gradient(xv[j], wv[j], gv[j], r, c);
      store_floats<W>(dx + row * d, i, xv);
    });
  }
}

namespace warp_rows = kernels::warp_rows;

// The blocks of the register-row backwards: about two per SM of a 132-SM part, one wave, each
// row group taking its share of the rows in turn. A count fixed here, not read from the device,
// keeps the order of the parameter gradients' sums, so its bits, the same on every GPU.
inline constexpr std::int64_t register_rows_backward_blocks = 256;

// Calls launch.template operator()<Warps>() with the warps per row that hold a row of d in
// registers (1 up to 1024 columns, the block's 8 up to 8192); false when none do.
template <class Launch>
bool with_register_rows(std::int64_t d, const Launch& launch) {
  if (d <= warp_rows::max_cols<1>) {
    launch.template operator()<1>();
  } else if (d <= warp_rows::max_cols<warp_rows::warps_per_block>) {
    launch.template operator()<warp_rows::warps_per_block>();
  } else {
    return false;
  }
  return true;
}

template <int Warps>
std::int64_t register_row_blocks(std::int64_t rows, std::int64_t most) {
  constexpr std::int64_t per_block = warp_rows::row_group<Warps>::per_block;
  return std::clamp<std::int64_t>((rows + per_block - 1) / per_block, 1, most);
}

// The register-row forwards' launch with Warps warps per row (with_register_rows' choice): as
// many blocks as the rows' groups fill, the grid's limit at most.
template <int Warps, class... Params, class... Args>
void launch_register_rows_forward(cudaStream_t stream, std::int64_t rows, std::int64_t d, bool vectors,
                                  void (*wide)(Params...), void (*narrow)(Params...), Args... args) {
  const std::size_t bytes = Warps == 1 ? 0 : warp_rows::shared_bytes<Warps>(d);
  launch_by_width(stream, register_row_blocks<Warps>(rows, 65535), bytes, vectors, wide, narrow, args...);
}

// The register-row backwards' launch: register_rows_backward_blocks blocks at most, each writing
// K rows of d column sums (its share of the parameter gradients, one row per gradient) to the
// partials the kernel takes as its last argument; add_column_totals then adds the blocks' rows
// into out in block order.
template <int Warps, int K, class... Params, class... Args>
void launch_register_rows_backward(cudaStream_t stream, cudaMemPool_t pool, std::int64_t rows, std::int64_t d,
                                   vec<float*, K> out, bool vectors, void (*wide)(Params...),
                                   void (*narrow)(Params...), Args... args) {
  const std::int64_t blocks = register_row_blocks<Warps>(rows, register_rows_backward_blocks);
  // Every block writes its rows whole (store_block_column_sums), so no zeros first.
  auto partials = device_buffer<float>::for_overwrite(static_cast<std::size_t>(K * blocks * d), pool, stream);
  launch_by_width(stream, blocks, warp_rows::shared_bytes<Warps>(d), vectors, wide, narrow, args...,
                  partials.data());
  add_column_totals<K>(stream, d, blocks, partials.data(), out);
}

template <int W, int Warps, class T, class Wt>
__global__ void __launch_bounds__(block_threads)
    rmsnorm_register_rows_forward_kernel(std::int64_t rows, std::int64_t d, const T* x, const Wt* w, float eps, T* y,
                                         float* r) {
  extern __shared__ __align__(16) unsigned char rmsnorm_row_sums[];
  warp_block block(rmsnorm_row_sums);
  warp_rows::rmsnorm_forward<W, Warps>(block, blockIdx.x, gridDim.x, rows, d, x, w, eps, y, r);
}

template <int W, int Warps, class T, class Wt>
__global__ void __launch_bounds__(block_threads)
    rmsnorm_register_rows_backward_kernel(std::int64_t rows, std::int64_t d, const T* x, const Wt* w, const float* r,
                                          const T* dy, T* dx, float* dw_partials) {
  extern __shared__ __align__(16) unsigned char rmsnorm_column_sums[];
  warp_block block(rmsnorm_column_sums);
  warp_rows::rmsnorm_backward<W, Warps>(block, blockIdx.x, gridDim.x, rows, d, x, w, r, dy, dx, dw_partials);
}

template <int W, int Warps, class T, class Wt>
__global__ void __launch_bounds__(block_threads)
    layernorm_register_rows_forward_kernel(std::int64_t rows, std::int64_t d, const T* x, const Wt* w, const Wt* b,
                                           float eps, T* y, kernels::layernorm_stats* stats) {
  extern __shared__ __align__(16) unsigned char layernorm_row_sums[];
  warp_block block(layernorm_row_sums);
  warp_rows::layernorm_forward<W, Warps>(block, blockIdx.x, gridDim.x, rows, d, x, w, b, eps, y, stats);
}

template <int W, int Warps, class T, class Wt>
__global__ void __launch_bounds__(block_threads)
    layernorm_register_rows_backward_kernel(std::int64_t rows, std::int64_t d, const T* x, const Wt* w,
                                            const kernels::layernorm_stats* stats, const T* dy, T* dx,
                                            float* partials) {
  extern __shared__ __align__(16) unsigned char layernorm_column_sums[];
  warp_block block(layernorm_column_sums);
  // dw's partial rows, then db's: the layout add_column_totals<2> reads.
  warp_rows::layernorm_backward<W, Warps>(block, blockIdx.x, gridDim.x, rows, d, x, w, stats, dy, dx, partials,
                                          partials + static_cast<std::int64_t>(gridDim.x) * d);
}

template <class T>
struct rmsnorm_weight_term {
  const T* x;
  const T* dy;
  const float* r;
  std::int64_t d;
  __device__ vec<float, 1> operator()(std::int64_t row, std::int64_t c) const {
    return {{kernels::rmsnorm_weight_gradient(static_cast<float>(x[row * d + c]), static_cast<float>(dy[row * d + c]), r[row])}};
  }
};

template <int W, class T, class Wt>
__global__ void __launch_bounds__(block_threads)
    layernorm_forward_kernel(std::int64_t rows, std::int64_t d, const T* x, const Wt* w, const Wt* b, float eps, T* y,
                             kernels::layernorm_stats* stats_out) {
  __shared__ typename block_reduce<float>::TempStorage scratch;
  __shared__ float shared;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * d;
    float sum = 0.0f;
    for_row_vectors<W>(d, [&](std::int64_t i) {
      float v[W];
      load_floats<W>(xr, i, v);
#pragma unroll
      for (int j = 0; j < W; ++j) sum += v[j];
    });
    const float mean = kernels::layernorm_mean(block_combine(scratch, shared, sum, plus{}), d);
    float variance = 0.0f;
    for_row_vectors<W>(d, [&](std::int64_t i) {
      float v[W];
      load_floats<W>(xr, i, v);
#pragma unroll
      for (int j = 0; j < W; ++j) variance += kernels::layernorm_variance_term(v[j], mean);
    });
    const kernels::layernorm_stats s{mean, kernels::layernorm_rstd(block_combine(scratch, shared, variance, plus{}), d, eps)};
    for_row_vectors<W>(d, [&](std::int64_t i) {
      float v[W], wv[W], bv[W];
      load_floats<W>(xr, i, v);
      load_floats<W>(w, i, wv);
      load_floats<W>(b, i, bv);
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = kernels::layernorm_output(v[j], s, wv[j], bv[j]);
      store_floats<W>(y + row * d, i, v);
    });
    if (threadIdx.x == 0 && stats_out != nullptr) stats_out[row] = s;
  }
}

template <int W, class T, class Wt>
__global__ void __launch_bounds__(block_threads)
    layernorm_backward_kernel(std::int64_t rows, std::int64_t d, const T* x, const Wt* w,
                              const kernels::layernorm_stats* stats, const T* dy, T* dx) {
  __shared__ typename block_reduce<float>::TempStorage scratch;
  __shared__ float shared;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * d;
    const T* dyr = dy + row * d;
    const kernels::layernorm_stats s = stats[row];
    kernels::layernorm_backward_sums sums{0.0f, 0.0f};
    for_row_vectors<W>(d, [&](std::int64_t i) {
      float xv[W], wv[W], gv[W];
      load_floats<W>(xr, i, xv);
      load_floats<W>(w, i, wv);
      load_floats<W>(dyr, i, gv);
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const kernels::layernorm_backward_sums t = kernels::layernorm_backward_terms(xv[j], wv[j], gv[j], s);
        sums.w_dy += t.w_dy;
        sums.w_dy_xhat += t.w_dy_xhat;
      }
    });
    sums.w_dy = block_combine(scratch, shared, sums.w_dy, plus{});
    sums.w_dy_xhat = block_combine(scratch, shared, sums.w_dy_xhat, plus{});
    for_row_vectors<W>(d, [&](std::int64_t i) {
      float xv[W], wv[W], gv[W];
      load_floats<W>(xr, i, xv);
      load_floats<W>(w, i, wv);
      load_floats<W>(dyr, i, gv);
#pragma unroll
      for (int j = 0; j < W; ++j) xv[j] = kernels::layernorm_input_gradient(xv[j], wv[j], gv[j], s, sums, d);
      store_floats<W>(dx + row * d, i, xv);
    });
  }
}

template <class T>
struct layernorm_parameter_terms {
  const T* x;
  const T* dy;
  const kernels::layernorm_stats* stats;
  std::int64_t d;
  __device__ vec<float, 2> operator()(std::int64_t row, std::int64_t c) const {
    const float dyv = static_cast<float>(dy[row * d + c]);
    return {{kernels::layernorm_weight_gradient(static_cast<float>(x[row * d + c]), dyv, stats[row]), dyv}};
  }
};

}  // namespace detail

// y[row] = rmsnorm(x[row]) * w; r[row] = 1/rms (may be null when not needed).
template <class T, class Wt>
void rmsnorm_forward(cudaStream_t stream, std::int64_t rows, std::int64_t d, const T* x, const Wt* w, float eps, T* y,
                     float* r) {
  if (rows <= 0 || d <= 0) return;
  constexpr int W = common_width<T, Wt>;
  const bool vectors = row_vectors_fit(d, x, w, static_cast<const T*>(y));
  static_assert(block_threads == detail::warp_rows::warps_per_block * detail::warp_rows::lanes);
  if (detail::with_register_rows(d, [&]<int Warps>() {
        detail::launch_register_rows_forward<Warps>(stream, rows, d, vectors,
                                                    detail::rmsnorm_register_rows_forward_kernel<W, Warps, T, Wt>,
                                                    detail::rmsnorm_register_rows_forward_kernel<1, Warps, T, Wt>,
                                                    rows, d, x, w, eps, y, r);
      }))
    return;
  detail::launch_rows(stream, rows, vectors, detail::rmsnorm_forward_kernel<W, T, Wt>,
                      detail::rmsnorm_forward_kernel<1, T, Wt>, rows, d, x, w, eps, y, r);
}

// dx from dy, x and the saved r; dw[c] += sum over rows of dy x r (fp32).
template <class T, class Wt>
void rmsnorm_backward(cudaStream_t stream, cudaMemPool_t pool, std::int64_t rows, std::int64_t d, const T* x,
                      const Wt* w, const float* r, const T* dy, T* dx, float* dw) {
  if (rows <= 0 || d <= 0) return;
  constexpr int W = common_width<T, Wt>;
  const bool vectors = row_vectors_fit(d, x, w, dy, static_cast<const T*>(dx));
  if (detail::with_register_rows(d, [&]<int Warps>() {
        detail::launch_register_rows_backward<Warps, 1>(
            stream, pool, rows, d, vec<float*, 1>{{dw}}, vectors,
            detail::rmsnorm_register_rows_backward_kernel<W, Warps, T, Wt>,
            detail::rmsnorm_register_rows_backward_kernel<1, Warps, T, Wt>, rows, d, x, w, r, dy, dx);
      }))
    return;
  // The weight gradient reads dy, so it goes first when dx overwrites dy.
  detail::column_sums<1>(stream, pool, rows, d, detail::rmsnorm_weight_term<T>{x, dy, r, d}, vec<float*, 1>{{dw}});
  detail::launch_rows(stream, rows, vectors, detail::rmsnorm_backward_kernel<W, T, Wt>,
                      detail::rmsnorm_backward_kernel<1, T, Wt>, rows, d, x, w, r, dy, dx);
}

// y[row] = layernorm(x[row]) * w + b; stats[row] = (mean, rstd) (may be null when not needed).
template <class T, class Wt>
void layernorm_forward(cudaStream_t stream, std::int64_t rows, std::int64_t d, const T* x, const Wt* w, const Wt* b,
                       float eps, T* y, kernels::layernorm_stats* stats) {
  if (rows <= 0 || d <= 0) return;
  constexpr int W = common_width<T, Wt>;
  const bool vectors = row_vectors_fit(d, x, w, b, static_cast<const T*>(y));
  if (detail::with_register_rows(d, [&]<int Warps>() {
        detail::launch_register_rows_forward<Warps>(stream, rows, d, vectors,
                                                    detail::layernorm_register_rows_forward_kernel<W, Warps, T, Wt>,
                                                    detail::layernorm_register_rows_forward_kernel<1, Warps, T, Wt>,
                                                    rows, d, x, w, b, eps, y, stats);
      }))
    return;
  detail::launch_rows(stream, rows, vectors, detail::layernorm_forward_kernel<W, T, Wt>,
                      detail::layernorm_forward_kernel<1, T, Wt>, rows, d, x, w, b, eps, y, stats);
}

// dx from dy, x and the saved stats; dw[c] += sum over rows of dy xhat, db[c] += sum of dy.
template <class T, class Wt>
void layernorm_backward(cudaStream_t stream, cudaMemPool_t pool, std::int64_t rows, std::int64_t d, const T* x,
                        const Wt* w, const kernels::layernorm_stats* stats, const T* dy, T* dx, float* dw, float* db) {
  if (rows <= 0 || d <= 0) return;
  constexpr int W = common_width<T, Wt>;
  const bool vectors = row_vectors_fit(d, x, w, dy, static_cast<const T*>(dx));
  if (detail::with_register_rows(d, [&]<int Warps>() {
        detail::launch_register_rows_backward<Warps, 2>(
            stream, pool, rows, d, vec<float*, 2>{{dw, db}}, vectors,
            detail::layernorm_register_rows_backward_kernel<W, Warps, T, Wt>,
            detail::layernorm_register_rows_backward_kernel<1, Warps, T, Wt>, rows, d, x, w, stats, dy, dx);
      }))
    return;
  // The parameter gradients read dy, so they go first when dx overwrites dy.
  detail::column_sums<2>(stream, pool, rows, d, detail::layernorm_parameter_terms<T>{x, dy, stats, d},
                         vec<float*, 2>{{dw, db}});
  detail::launch_rows(stream, rows, vectors, detail::layernorm_backward_kernel<W, T, Wt>,
                      detail::layernorm_backward_kernel<1, T, Wt>, rows, d, x, w, stats, dy, dx);
}

}  // namespace tpx::cuda

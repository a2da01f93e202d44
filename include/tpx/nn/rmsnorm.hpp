// RMSNorm over the columns of a [Rows, Cols] tensor whose columns may be sharded (tensor
// parallel: x[B_X, D_Y]), with the statistics reduced as typed partial sums.
//
//   y[r, c] = x[r, c] * rstd[r] * w[c],   rstd[r] = 1 / sqrt(mean_c x[r, c]^2 + eps)
//
// Each rank sums x^2 over its block of columns; that is a partial sum over the axes that split
// Cols (a Tensor<float, Rows, Unreduced<...>>), and reshard to Tensor<float, Rows> all-reduces it.
// The backward pass needs one more such sum, sum_c w dy x, and returns the weight gradient as a
// partial sum over the axes that split Rows (each rank saw only its rows): the caller reduces it
// onto the weight's shards, e.g. with ReduceScatter as the adjoint of the weight's AllGather.
//
// The row loops run on the host. For tensors of another memory space (the GPU) they read and
// write staged host copies (tensor/staging.hpp), while the reductions of the row statistics run
// in the tensors' own space: a correctness-first fallback, since cuda/kernels/norms.hpp's
// one-block-per-row kernels need the whole row on one rank and here the row may be sharded.
#pragma once

#include <cmath>
#include <cstdint>

#include "tpx/ops/reshard.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/staging.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::nn {

namespace detail {
// Row sums of f(r, c) over all columns of x's global row, on every rank of the row's group, in
// host memory; x is a host tensor, the sums are reduced in Space.
template <class Space, class Xt, class F>
auto row_sums(const Xt& x, F&& f) {
  using Row = type_at_t<0, typename Xt::dims>;
  using Col = type_at_t<1, typename Xt::dims>;
  using Partial = tensor_with_t<Tensor<float>, type_list<Row>, as_unreduced_t<typename Col::axes>>;
  Partial partial(x.context(), typename Partial::shape_type(index_array<1>{x.global_extent(0)}));
  const std::int64_t rows = x.local_extent(0), cols = x.local_extent(1);
  for (std::int64_t r = 0; r < rows; ++r) {
    float s = 0;
    for (std::int64_t c = 0; c < cols; ++c) s += f(r, c);
    partial.local()[r] = s;
  }
  auto sums = reshard<BasicTensor<Space, float, Row>>(in_space<Space>(std::move(partial)));
  if constexpr (std::is_same_v<Space, host_space>)
    return sums;
  else
    return on_host(sums);
}
}  // namespace detail

template <class Xt, class Rstd>
struct rmsnorm_output {
  Xt y;
  Rstd rstd;  // [Rows], kept for the backward pass
};

// x: [Rows, Cols_...], w: [Cols_...] with the same split of Cols as x.
template <AnyTensor Xt, AnyTensor Wt>
auto rmsnorm_forward(const Xt& x_in, const Wt& w_in, float eps = 1e-5f) {
  static_assert(std::is_same_v<typename Wt::dims, type_list<type_at_t<1, typename Xt::dims>>>,
                "tpx: rmsnorm: the weight must be split like the normalized dim of x");
  using Space = typename Xt::space;
  const auto& x = on_host(x_in);
  const auto& w = on_host(w_in);
  const std::int64_t rows = x.local_extent(0), cols = x.local_extent(1);
  const float n = static_cast<float>(x.global_extent(1));
  auto rstd = detail::row_sums<Space>(x, [&](std::int64_t r, std::int64_t c) {
    const float v = x.local()[r * cols + c];
    return v * v;
  });
  for (float& s : rstd.local()) s = 1.0f / std::sqrt(s / n + eps);
  host_twin_t<Xt> y(x.context(), x.shape());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      y.local()[r * cols + c] = static_cast<float>(x.local()[r * cols + c]) * rstd.local()[r] *
                                static_cast<float>(w.local()[c]);
  using Rstd = BasicTensor<Space, float, type_at_t<0, typename Xt::dims>>;
  return rmsnorm_output<Xt, Rstd>{in_space<Space>(std::move(y)), in_space<Space>(std::move(rstd))};
}

template <class Xt, class Dw>
struct rmsnorm_gradients {
  Xt dx;
  Dw dw;  // [Cols_...]{U over Rows' axes}
};

// dx = rstd (w dy) - x rstd^3 / n * sum_c (w dy x);  dw[c] = sum_r dy x rstd.
template <AnyTensor Xt, AnyTensor Wt, AnyTensor Rstd>
auto rmsnorm_backward(const Xt& x_in, const Wt& w_in, const Rstd& rstd_in, const Xt& dy_in) {
  using Space = typename Xt::space;
  const auto& x = on_host(x_in);
  const auto& w = on_host(w_in);
  const auto& rstd = on_host(rstd_in);
  const auto& dy = on_host(dy_in);
  using Row = type_at_t<0, typename Xt::dims>;
  using Col = type_at_t<1, typename Xt::dims>;
  const std::int64_t rows = x.local_extent(0), cols = x.local_extent(1);
  const float n = static_cast<float>(x.global_extent(1));
  auto at = [cols](const auto& t, std::int64_t r, std::int64_t c) {
    return static_cast<float>(t.local()[r * cols + c]);
  };
  const auto dot = detail::row_sums<Space>(x, [&](std::int64_t r, std::int64_t c) {
    return static_cast<float>(w.local()[c]) * at(dy, r, c) * at(x, r, c);
  });
  host_twin_t<Xt> dx(x.context(), x.shape());
  using Dw =
      tensor_with_t<BasicTensor<Space, float>, type_list<Col>, as_unreduced_t<typename Row::axes>>;
  host_twin_t<Dw> dw(x.context(), typename Dw::shape_type(index_array<1>{x.global_extent(1)}));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float s = rstd.local()[r];
    for (std::int64_t c = 0; c < cols; ++c) {
      dx.local()[r * cols + c] = s * static_cast<float>(w.local()[c]) * at(dy, r, c) -
                                 at(x, r, c) * s * s * s / n * dot.local()[r];
      dw.local()[c] += at(dy, r, c) * at(x, r, c) * s;
    }
  }
  return rmsnorm_gradients<Xt, Dw>{in_space<Space>(std::move(dx)), in_space<Space>(std::move(dw))};
}

}  // namespace tpx::nn

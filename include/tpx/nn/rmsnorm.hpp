// RMSNorm over the last dim of a [Rows..., Cols] tensor whose columns may be sharded (tensor
// parallel: x[B_X, D_Y]; sequence parallel: x[B_X, T_Y, D]), with the statistics reduced as typed
// partial sums. Any number of leading dims are rows (nn/rows.hpp).
//
//   y[r, c] = x[r, c] * rstd[r] * w[c],   rstd[r] = 1 / sqrt(mean_c x[r, c]^2 + eps)
//
// Each rank sums x^2 over its block of columns; that is a partial sum over the axes that split
// Cols (a Tensor<float, Rows..., Unreduced<...>>), and reshard to Tensor<float, Rows...>
// all-reduces it. The backward pass needs one more such sum, sum_c w dy x, and returns the weight
// gradient as a partial sum over the axes that split the Rows dims (each rank saw only its rows):
// the caller reduces it onto the weight's shards, e.g. with ReduceScatter as the adjoint of the
// weight's AllGather. The backward pass is linear in dy, which may itself be a partial sum over
// axes along which x is whole (plain tensor parallelism's replicated stream, {U_Y}): dx and the
// weight gradient are then partial over those axes too.
//
// Everything runs in the tensors' memory space, through its grid loops (tensor/host_space.hpp,
// cuda/kernels/grid.hpp) and the functors of kernels/grid_terms.hpp: the same math on the host
// and the GPU, and nothing copied to the host. When every rank holds whole rows (Cols unsplit, as
// in sequence parallelism's x[B_X, T_Y, D], or split over axes of one rank, as on a 1x1 mesh)
// and the space has whole-row RMSNorm kernels (rmsnorm_rows and rmsnorm_rows_backward: the
// GPU's, cuda/kernels/norms.hpp), the layer calls those instead: one pass over x forward, one
// over x and dy backward, where the grid loops take two and three. The host keeps its grid
// loops, which use its vector lanes better than a row at a time.
#pragma once

#include <cstdint>
#include <type_traits>

#include "tpx/core/compile_error.hpp"
#include "tpx/kernels/grid_terms.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/nn/rows.hpp"
#include "tpx/ops/elementwise.hpp"
#include "tpx/ops/reshard.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::nn {

namespace detail {
// A space with RMSNorm kernels over whole rows of T, with weights of W.
template <class Space, class T, class W>
concept whole_row_rmsnorm_space =
    requires(const rank_context& ctx, std::int64_t n, const T* x, const W* w, const float* rstd, T* y, float* out) {
      Space::rmsnorm_rows(ctx, n, n, x, w, 1.0f, y, out);
      Space::rmsnorm_rows_backward(ctx, n, n, x, w, rstd, x, y, out);
    };

// Whether the layer may run on Xt with Wt through the space's whole-row kernels: the space has
// them.
template <class Xt, class Wt>
inline constexpr bool has_whole_row_kernels =
    whole_row_rmsnorm_space<typename Xt::space, typename Xt::value_type, typename Wt::value_type>;

// Whether every rank holds whole rows of x: no mesh axis that splits its last dim has more than
// one rank (D unsplit, or split over axes of size 1 as on a 1x1 mesh). The same on every rank.
template <class Xt>
bool holds_whole_rows(const Xt& x) {
  return []<class... Axes>(const rank_context& ctx, type_list<Axes...>) {
    return ((ctx.template axis<Axes>().size == 1) && ...);
  }(x.context(), typename last_dim_t<Xt>::axes{});
}

// The tensor of one float per row of Xt, unreduced over the axes that split Xt's last dim: what
// each rank's row sums over its columns are.
template <class Xt>
using row_partial_t = per_row_t<Xt, float, as_unreduced_t<typename last_dim_t<Xt>::axes>>;

// The whole rows' R-folds of term, on every rank of a row's group: each rank folds its columns,
// then the partial results are all-reduced over the column axes (a no-op when Cols is unsplit).
template <class R, class Xt, class Term>
auto row_sums(const Xt& x, const Term& term) {
  auto partial = make_per_row<row_partial_t<Xt>>(x);
  Xt::space::template reduce_rows<R>(x.context(), local_rows(x), local_cols(x), term,
                                     partial.data());
  return reshard<per_row_t<Xt>>(partial);
}

template <class Xt, class Wt>
constexpr void check_rmsnorm_operands() {
  static_assert(Xt::order >= 2 && std::is_same_v<typename Xt::unreduced, Unreduced<>>,
                "tpx: rmsnorm: x must be a reduced [Rows..., Cols] tensor");
  static_assert(std::is_same_v<typename Wt::dims, type_list<last_dim_t<Xt>>>,
                "tpx: rmsnorm: the weight must be split like the normalized (last) dim of x");
  static_assert(std::is_same_v<typename Xt::space, typename Wt::space>,
                "tpx: rmsnorm: x and the weight must be in the same memory space");
}

// dy: x's dims split alike (so a partial sum only over axes along which x is whole: a type
// unreduced over an axis that splits one of its dims does not exist), x's element type and
// memory space.
template <class Xt, class Dyt>
constexpr void check_rmsnorm_gradient() {
  if constexpr (!std::is_same_v<typename Dyt::dims, typename Xt::dims> ||
                !std::is_same_v<typename Dyt::value_type, typename Xt::value_type> ||
                !std::is_same_v<typename Dyt::space, typename Xt::space>)
    compile_error<"tpx: rmsnorm_backward: dy " + Dyt::notation + " must have the dims of x " +
                  Xt::notation + ", split alike, and its element type and memory space">{};
}
}  // namespace detail

template <class Xt, class Rstd>
struct rmsnorm_output {
  Xt y;
  Rstd rstd;  // [Rows...], kept for the backward pass
};

// x: [Rows..., Cols_...], w: [Cols_...] with the same split of Cols as x.
template <AnyTensor Xt, AnyTensor Wt>
auto rmsnorm_forward(const Xt& x, const Wt& w, float eps = 1e-5f) {
  detail::check_rmsnorm_operands<Xt, Wt>();
  using T = typename Xt::value_type;
  using W = typename Wt::value_type;
  using Rstd = per_row_t<Xt>;
  const std::int64_t rows = local_rows(x), cols = local_cols(x);
  Xt y(x.context(), x.shape(), for_overwrite);
  if constexpr (detail::has_whole_row_kernels<Xt, Wt>) {
    if (detail::holds_whole_rows(x)) {
      auto rstd = make_per_row<Rstd>(x);
      Xt::space::rmsnorm_rows(x.context(), rows, cols, x.data(), w.data(), eps, y.data(), rstd.data());
      return rmsnorm_output<Xt, Rstd>{std::move(y), std::move(rstd)};
    }
  }
  const auto sums =
      detail::row_sums<kernels::sum_of_squares_reducer<float>>(x, kernels::element_at<T>{x.data(), cols});
  Rstd rstd = map(kernels::rmsnorm_inverse{x.global_extent(Xt::order - 1), eps}, sums);
  Xt::space::for_each_element(x.context(), rows, cols,
                              kernels::rmsnorm_apply<T, W>{x.data(), w.data(), rstd.data(), cols, y.data()});
  return rmsnorm_output<Xt, Rstd>{std::move(y), std::move(rstd)};
}

template <class Dx, class Dw>
struct rmsnorm_gradients {
  Dx dx;  // dy's type
  Dw dw;  // [Cols_...]{U over the axes of every Rows dim}, fp32
};

// dx = rstd (w dy) - x rstd^3 / n * sum_c (w dy x);  dw[c] = sum_r dy x rstd.
// Both are linear in dy, so dy may be a partial sum, {U_Y}, over axes along which x is whole and
// the same on every rank (the gradient of a stream replicated over Y, as in plain tensor
// parallelism: each rank holds its heads' share); dx and dw are then partial sums over them too.
template <AnyTensor Xt, AnyTensor Wt, AnyTensor Rstd, AnyTensor Dyt>
auto rmsnorm_backward(const Xt& x, const Wt& w, const Rstd& rstd, const Dyt& dy) {
  detail::check_rmsnorm_operands<Xt, Wt>();
  detail::check_rmsnorm_gradient<Xt, Dyt>();
  using T = typename Xt::value_type;
  using W = typename Wt::value_type;
  using Col = last_dim_t<Xt>;
  const std::int64_t rows = local_rows(x), cols = local_cols(x);
  const std::int64_t n = x.global_extent(Xt::order - 1);
  Dyt dx(x.context(), x.shape(), for_overwrite);
  using Dw =
      tensor_with_t<BasicTensor<typename Xt::space, float>, type_list<Col>,
                    unreduced_union_t<as_unreduced_t<row_axes_t<Xt>>, typename Dyt::unreduced>>;
  Dw dw(x.context(), typename Dw::shape_type(index_array<1>{n}));
  if constexpr (detail::has_whole_row_kernels<Xt, Wt>) {
    if (detail::holds_whole_rows(x)) {
      Xt::space::rmsnorm_rows_backward(x.context(), rows, cols, x.data(), w.data(), rstd.data(), dy.data(),
                                       dx.data(), dw.data());
      return rmsnorm_gradients<Dyt, Dw>{std::move(dx), std::move(dw)};
    }
  }
  // Typed whole over the column axes; a partial sum over dy's own unreduced axes, like dy.
  const auto dot = detail::row_sums<kernels::sum_reducer<float>>(
      x, kernels::rmsnorm_backward_term_at<T, W>{x.data(), w.data(), dy.data(), cols});
  Xt::space::for_each_element(x.context(), rows, cols,
                              kernels::rmsnorm_input_gradient_at<T, W>{x.data(), w.data(), dy.data(), rstd.data(),
                                                                       dot.data(), cols, n, dx.data()});
  Xt::space::sum_columns(x.context(), rows, cols,
                         kernels::rmsnorm_weight_term_at<T>{x.data(), dy.data(), rstd.data(), cols}, dw.data());
  return rmsnorm_gradients<Dyt, Dw>{std::move(dx), std::move(dw)};
}

}  // namespace tpx::nn

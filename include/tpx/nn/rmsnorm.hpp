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
// The weight may also carry x's first dim, split alike (w[S_P, D_Y] for x[S_P, B_X, D_Y]): a
// weight per block of that dim, as a pipeline stacks its stages' layers (nn/pipeline.hpp), each
// block's rows normalized with their own block's weight, and the weight's gradient [S_P, D_Y] a
// partial sum over the other rows' axes only. Each rank runs the layer's kernels once per block
// of that dim it holds (one, for a stage dim split over the stages).
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

// fn(first_row, rows, first_weight) for each run of x's local rows that one block of the weight
// normalizes: all of them for a weight [Cols]; each local block of x's first dim for a weight
// [First, Cols], whose block b starts b cols elements in.
template <class Wt, class Xt, class Fn>
void for_each_weight_block(const Xt& x, const Fn& fn) {
  for_each_row_block<Wt::order == 2>(x, [&](std::int64_t first, std::int64_t rows, std::int64_t b) {
    fn(first, rows, b * local_cols(x));
  });
}

// The whole rows' R-folds of term_of(first_row, first_weight)'s terms, a run of rows at a time
// (for_each_weight_block's runs), on every rank of a row's group: each rank folds its columns,
// then the partial results are all-reduced over the column axes (a no-op when Cols is unsplit).
template <class R, class Wt, class Xt, class TermOf>
auto row_sums(const Xt& x, const TermOf& term_of) {
  auto partial = make_per_row<row_partial_t<Xt>>(x);
  for_each_weight_block<Wt>(x, [&](std::int64_t first, std::int64_t rows, std::int64_t w) {
    Xt::space::template reduce_rows<R>(x.context(), rows, local_cols(x), term_of(first, w),
                                       partial.data() + first);
  });
  return reshard<per_row_t<Xt>>(partial);
}

template <class Xt, class Wt>
constexpr void check_rmsnorm_operands() {
  static_assert(Xt::order >= 2 && std::is_same_v<typename Xt::unreduced, Unreduced<>>,
                "tpx: rmsnorm: x must be a reduced [Rows..., Cols] tensor");
  if constexpr (Wt::order == 2) {
    if constexpr (!std::is_same_v<typename Wt::dims,
                                  type_list<type_at_t<0, typename Xt::dims>, last_dim_t<Xt>>>)
      compile_error<"tpx: rmsnorm: a weight " + Wt::notation +
                    " per block must have the first and last dims of x " + Xt::notation +
                    ", split alike">{};
  } else {
    static_assert(std::is_same_v<typename Wt::dims, type_list<last_dim_t<Xt>>>,
                  "tpx: rmsnorm: the weight must be split like the normalized (last) dim of x");
  }
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

// x: [Rows..., Cols_...], w: [Cols_...] with the same split of Cols as x, or [First, Cols_...]
// with x's first dim (a weight per block of it).
template <AnyTensor Xt, AnyTensor Wt>
auto rmsnorm_forward(const Xt& x, const Wt& w, float eps = 1e-5f) {
  detail::check_rmsnorm_operands<Xt, Wt>();
  using T = typename Xt::value_type;
  using W = typename Wt::value_type;
  using Rstd = per_row_t<Xt>;
  const std::int64_t cols = local_cols(x);
  Xt y(x.context(), x.shape(), for_overwrite);
  if constexpr (detail::has_whole_row_kernels<Xt, Wt>) {
    if (detail::holds_whole_rows(x)) {
      auto rstd = make_per_row<Rstd>(x);
      detail::for_each_weight_block<Wt>(
          x, [&](std::int64_t first, std::int64_t rows, std::int64_t wb) {
            Xt::space::rmsnorm_rows(x.context(), rows, cols, x.data() + first * cols, w.data() + wb,
                                    eps, y.data() + first * cols, rstd.data() + first);
          });
      return rmsnorm_output<Xt, Rstd>{std::move(y), std::move(rstd)};
    }
  }
  const auto sums = detail::row_sums<kernels::sum_of_squares_reducer<float>, Wt>(
      x, [&](std::int64_t first, std::int64_t) {
        return kernels::element_at<T>{x.data() + first * cols, cols};
      });
  Rstd rstd = map(kernels::rmsnorm_inverse{x.global_extent(Xt::order - 1), eps}, sums);
  detail::for_each_weight_block<Wt>(x, [&](std::int64_t first, std::int64_t rows, std::int64_t wb) {
    Xt::space::for_each_element(
        x.context(), rows, cols,
        kernels::rmsnorm_apply<T, W>{x.data() + first * cols, w.data() + wb, rstd.data() + first,
                                     cols, y.data() + first * cols});
  });
  return rmsnorm_output<Xt, Rstd>{std::move(y), std::move(rstd)};
}

template <class Dx, class Dw>
struct rmsnorm_gradients {
  Dx dx;  // dy's type
  Dw dw;  // the weight's dims, fp32, {U over the axes of every Rows dim the weight has not}
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
  const std::int64_t cols = local_cols(x);
  const std::int64_t n = x.global_extent(Xt::order - 1);
  Dyt dx(x.context(), x.shape(), for_overwrite);
  // A partial sum over the rows' axes (each rank saw its rows), but those of a dim the weight has.
  using WeightAxes = typename detail::axes_of_dims<typename Wt::dims>::type;
  using Dw =
      tensor_with_t<BasicTensor<typename Xt::space, float>, typename Wt::dims,
                    unreduced_union_t<as_unreduced_t<remove_all_t<row_axes_t<Xt>, WeightAxes>>,
                                      typename Dyt::unreduced>>;
  Dw dw(x.context(), typename Dw::shape_type(w.global_extents()));
  if constexpr (detail::has_whole_row_kernels<Xt, Wt>) {
    if (detail::holds_whole_rows(x)) {
      detail::for_each_weight_block<Wt>(x, [&](std::int64_t first, std::int64_t rows,
                                               std::int64_t wb) {
        Xt::space::rmsnorm_rows_backward(
            x.context(), rows, cols, x.data() + first * cols, w.data() + wb, rstd.data() + first,
            dy.data() + first * cols, dx.data() + first * cols, dw.data() + wb);
      });
      return rmsnorm_gradients<Dyt, Dw>{std::move(dx), std::move(dw)};
    }
  }
  // Typed whole over the column axes; a partial sum over dy's own unreduced axes, like dy.
  const auto dot = detail::row_sums<kernels::sum_reducer<float>, Wt>(
      x, [&](std::int64_t first, std::int64_t wb) {
        return kernels::rmsnorm_backward_term_at<T, W>{x.data() + first * cols, w.data() + wb,
                                                       dy.data() + first * cols, cols};
      });
  detail::for_each_weight_block<Wt>(x, [&](std::int64_t first, std::int64_t rows, std::int64_t wb) {
    const std::int64_t at = first * cols;
    Xt::space::for_each_element(
        x.context(), rows, cols,
        kernels::rmsnorm_input_gradient_at<T, W>{x.data() + at, w.data() + wb, dy.data() + at,
                                                 rstd.data() + first, dot.data() + first, cols, n,
                                                 dx.data() + at});
    Xt::space::sum_columns(x.context(), rows, cols,
                           kernels::rmsnorm_weight_term_at<T>{x.data() + at, dy.data() + at,
                                                              rstd.data() + first, cols},
                           dw.data() + wb);
  });
  return rmsnorm_gradients<Dyt, Dw>{std::move(dx), std::move(dw)};
}

}  // namespace tpx::nn

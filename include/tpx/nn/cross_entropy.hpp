// Mean softmax cross-entropy of logits whose vocabulary is sharded (vocab-parallel, Megatron's
// VocabParallelCrossEntropy): logits[B_X, V_Y] -> the mean loss over the global batch, and the
// gradient of the logits, in the logits' own sharding. No rank ever holds a [B, V] row.
//
// For row r with target t, over the whole vocabulary:
//   m[r] = max_v x[r, v]                      each rank's row maximum, then AllReduce(max) over V's axes
//   s[r] = sum_v exp(x[r, v] - m[r])          a partial sum over V's axes, AllReduce(sum)
//   x_t[r]                                    the target's logit: the one rank holding column t
//                                             adds it, the others add 0; AllReduce(sum)
//   loss = 1/B sum_r (m[r] - x_t[r] + log s[r])   a partial sum over B's axes, AllReduce(sum)
//   dx[r, v] = (softmax(x)[r, v] - [v == t]) / B  local: every rank has m and s of its rows
// (kernels/cross_entropy.hpp's pieces, which the unsharded row functions are made of.) Each
// reduction is a typed partial sum (or partial maximum) reduced by the collective its type names,
// so the same code runs unsharded (no collective at all) and on any mesh.
//
// A space with a one-pass kernel for the row stats (softmax_stats_rows: the GPU's,
// cuda/kernels/softmax.hpp) reads the logits once for m and s instead of twice: each rank takes
// its block's max m_r and sum s_r = sum exp(x - m_r) together, AllReduce(max) gives m, and the
// rescaled s_r exp(m_r - m) are the partial sums that AllReduce(sum) adds (the same collectives).
// The host keeps the two folds, which its vector lanes run well. Such a space's gradient pass
// (cross_entropy_gradient_rows) takes each row's factors once and the logits in 16-byte vectors
// (kernels::cross_entropy_gradient_factors), where the host's grid loop divides per element.
//
// Any number of leading dims are rows (logits[B_X, T, V_Y] for a sequence model; nn/rows.hpp),
// and the mean is over all of them. The targets are column `column` of an int32 token tensor
// [Rows..., W] whose leading dims are split like the logits'. A target outside [0, V) gives a NaN loss. Everything runs in the logits' memory space.
//
// cross_entropy_per<S>(logits[S_P, B_X, V_Y], ...) keeps a loss per block of the leading dim S:
// a pipeline's microbatch on its loss stage (nn/pipeline.hpp), whose logits carry the stage dim
// S split over P. The loss is then [S_P], each block's the mean over that block's rows, reduced
// over the other rows' axes (X) only: a mean over S as well would all-reduce over P, which only
// the loss's stage reaches at that tick. Summed over a step's microbatches it is the loss on the
// loss's stage and 0 elsewhere, which one AllReduce over P per logged step gives every rank.
// `scale` multiplies the loss and its gradient (1/M for the mean over M microbatches), in the
// same pass.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "tpx/core/compile_error.hpp"
#include "tpx/kernels/grid_terms.hpp"
#include "tpx/kernels/reduction.hpp"
#include "tpx/nn/rows.hpp"
#include "tpx/ops/collectives.hpp"
#include "tpx/ops/reshard.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::nn {

namespace detail {
// A space with a one-pass kernel for each row's softmax stats over logits of T.
template <class Space, class T>
concept row_softmax_stats_space = requires(const rank_context& ctx, std::int64_t n, const T* logits, float* out) {
  Space::softmax_stats_rows(ctx, n, n, logits, out, out);
};

// A space with a row kernel for the loss's gradient over logits of T.
template <class Space, class T>
concept row_cross_entropy_gradient_space =
    requires(const rank_context& ctx, std::int64_t n, const T* logits, const float* stats, T* out) {
      Space::cross_entropy_gradient_rows(ctx, n, n, logits, stats, stats, kernels::token_at{}, n, 1.0f, out);
    };

// Whether Tn's first dim is S.
template <AnyTensor Tn, template <class...> class S>
constexpr bool leads_with() {
  if constexpr (Tn::order == 0)
    return false;
  else
    return same_dim_v<type_at_t<0, typename Tn::dims>, S<>>;
}

// t's partial maxima over every axis of Axes combined: AllReduce(max) over each in turn (over an
// axis of one rank, a t handed over moves on).
template <class Tn, class... Axes>
requires AnyTensor<std::remove_cvref_t<Tn>>
auto all_reduce_max_over(Tn&& t, type_list<Axes...>) {
  if constexpr (sizeof...(Axes) == 0) {
    return std::remove_cvref_t<Tn>(std::forward<Tn>(t));
  } else {
    return [&]<class First, class... Rest>(type_list<First, Rest...>) {
      return all_reduce_max_over(all_reduce_max<First>(std::forward<Tn>(t)), type_list<Rest...>{});
    }(type_list<Axes...>{});
  }
}
}  // namespace detail

template <class Loss, class Grad>
struct cross_entropy_result {
  Loss loss;  // the mean loss (per block of cross_entropy_per's dim), in the logits' memory space
  Grad dlogits;
};

namespace detail {
// The loss per block of the logits' first Kept dims (0 or 1), reduced over the other rows' axes,
// and the gradient of the logits; both scaled by `scale`.
template <std::size_t Kept, class L, AnyTensor Tok>
auto cross_entropy_by_blocks(L&& logits, const Tok& tokens, std::int64_t column, float scale) {
  using Lt = std::remove_cvref_t<L>;
  using Space = typename Lt::space;
  using Vocab = last_dim_t<Lt>;
  static_assert(Lt::order >= 2 && std::is_same_v<typename Lt::unreduced, Unreduced<>>,
                "tpx: cross_entropy: the logits must be a reduced [Rows..., Vocab] tensor");
  static_assert(Tok::order == Lt::order && std::is_same_v<row_dims_t<Tok>, row_dims_t<Lt>> &&
                    std::is_same_v<typename Tok::value_type, std::int32_t>,
                "tpx: cross_entropy: the targets must be int32 [Rows..., W], rows split like the "
                "logits'");
  static_assert(std::is_same_v<typename Tok::space, Space>,
                "tpx: cross_entropy: logits and targets must be in the same memory space");
  using T = typename Lt::value_type;
  const rank_context& ctx = logits.context();
  constexpr std::size_t last = Lt::order - 1;
  const std::int64_t rows = local_rows(logits), cols = local_cols(logits);
  const std::int64_t first = logits.local_offset(last), vocab = logits.global_extent(last);
  const kernels::token_at target{tokens.data(), local_cols(tokens), column};
  using Partial = per_row_t<Lt, float, as_unreduced_t<typename Vocab::axes>>;
  using Whole = per_row_t<Lt>;

  // Each row's max and sum of exp(x - max) over the whole vocabulary, on every rank of the row.
  const std::pair<Whole, Whole> stats = [&]() -> std::pair<Whole, Whole> {
    if constexpr (detail::row_softmax_stats_space<Space, T>) {
      auto block_max = make_per_row<Partial>(logits);
      auto block_sum = make_per_row<Partial>(logits);
      Space::softmax_stats_rows(ctx, rows, cols, logits.data(), block_max.data(), block_sum.data());
      if constexpr (std::is_same_v<Partial, Whole>) {  // the vocabulary is not split
        return {std::move(block_max), std::move(block_sum)};
      } else {
        Whole m = detail::all_reduce_max_over(block_max, typename Vocab::axes{});
        Space::transform(ctx, block_sum.size(), kernels::sum_relative_to_row_max{}, block_sum.data(),
                         static_cast<const float*>(block_sum.data()), static_cast<const float*>(block_max.data()),
                         static_cast<const float*>(m.data()));
        return {std::move(m), reshard<Whole>(std::move(block_sum))};
      }
    } else {
      const auto partial_rows = [&]<class R>(R, const auto& term) {
        auto p = make_per_row<Partial>(logits);
        Space::template reduce_rows<R>(ctx, rows, cols, term, p.data());
        return p;
      };
      Whole m = detail::all_reduce_max_over(
          partial_rows(kernels::max_reducer<float>{}, kernels::element_at<T>{logits.data(), cols}),
          typename Vocab::axes{});
      Whole s = reshard<Whole>(partial_rows(kernels::sum_reducer<float>{},
                                            kernels::exp_shifted_at<T>{logits.data(), m.data(), cols}));
      return {std::move(m), std::move(s)};
    }
  }();
  const Whole& row_max = stats.first;
  const Whole& row_sum = stats.second;
  auto target_partial = make_per_row<Partial>(logits);  // 0 on the ranks without the target
  Space::for_each_element(ctx, rows, 1,
                          kernels::target_logit_of_row<T>{logits.data(), target, first, cols, target_partial.data()});
  const Whole target_logit = reshard<Whole>(std::move(target_partial));

  // Each loss is the mean over its block's rows: kept_rows of them on this rank, out of
  // block_rows in all.
  using KeptDims =
      typename detail::leading_dims<typename Lt::dims, std::make_index_sequence<Kept>>::type;
  using KeptAxes = typename detail::axes_of_dims<KeptDims>::type;
  const std::int64_t losses = Kept == 0 ? 1 : logits.local_extent(0), kept_rows = rows / losses;
  const std::int64_t block_rows = global_rows(logits) / (Kept == 0 ? 1 : logits.global_extent(0));
  const float share = scale / static_cast<float>(block_rows);
  using LossPartial = tensor_with_t<BasicTensor<Space, float>, KeptDims,
                                    as_unreduced_t<remove_all_t<row_axes_t<Lt>, KeptAxes>>>;
  LossPartial loss = [&] {
    if constexpr (Kept == 0)
      return LossPartial(ctx, {}, for_overwrite);
    else
      return LossPartial(ctx,
                         typename LossPartial::shape_type(index_array<1>{logits.global_extent(0)}),
                         for_overwrite);
  }();
  Space::template reduce_rows<kernels::sum_reducer<float>>(
      ctx, losses, kept_rows,
      kernels::cross_entropy_loss_at{row_max.data(), row_sum.data(), target_logit.data(), target,
                                     vocab, share, kept_rows},
      loss.data());

  // Every read of the logits is above: from here each element is read once, then its gradient
  // written in its place when the logits are the gradient's buffer.
  const T* x = logits.data();
  Lt dlogits = [&] {
    if constexpr (std::is_lvalue_reference_v<L> || std::is_const_v<std::remove_reference_t<L>>)
      return Lt(ctx, logits.shape(), for_overwrite);
    else
      return Lt(std::move(logits));
  }();
  if constexpr (detail::row_cross_entropy_gradient_space<Space, T>) {
    Space::cross_entropy_gradient_rows(ctx, rows, cols, x, row_max.data(), row_sum.data(), target, first, share,
                                       dlogits.data());
  } else {
    Space::for_each_element(ctx, rows, cols,
                            kernels::cross_entropy_gradient_at<T, T>{x, row_max.data(), row_sum.data(), target, first,
                                                                     cols, share, dlogits.data()});
  }
  auto total =
      reshard<tensor_with_t<BasicTensor<Space, float>, KeptDims, Unreduced<>>>(std::move(loss));
  return cross_entropy_result<decltype(total), Lt>{std::move(total), std::move(dlogits)};
}
}  // namespace detail

// logits: [Rows..., Vocab] (Vocab may be sharded); tokens: int32 [Rows..., W] with the logits'
// rows, split alike. Logits passed as an rvalue (std::move) are overwritten by their gradient,
// which then needs no buffer of its own: at GPT-2's shape (16 x 1024 rows of 50,304 bf16) that is
// 1.65 GB less at the step's peak. Passed as an lvalue they are left as they are.
template <class L, AnyTensor Tok>
requires AnyTensor<std::remove_cvref_t<L>>
auto cross_entropy(L&& logits, const Tok& tokens, std::int64_t column) {
  return detail::cross_entropy_by_blocks<0>(std::forward<L>(logits), tokens, column, 1.0f);
}

// The same with a loss per block of the logits' first dim, which must be S: logits
// [S_P, Rows..., Vocab] -> loss [S_P], both loss and gradient scaled by `scale`.
template <template <class...> class S, class L, AnyTensor Tok>
requires AnyTensor<std::remove_cvref_t<L>>
auto cross_entropy_per(L&& logits, const Tok& tokens, std::int64_t column, float scale = 1.0f) {
  using Lt = std::remove_cvref_t<L>;
  if constexpr (!detail::leads_with<Lt, S>()) {
    compile_error<"tpx: cross_entropy_per<" + S<>::name + ">: logits " + Lt::notation +
                  " do not lead with dim " + S<>::name + ", the dim with a loss per block">{};
  } else {
    return detail::cross_entropy_by_blocks<1>(std::forward<L>(logits), tokens, column, scale);
  }
}

}  // namespace tpx::nn

// Embedding lookup by token, forward and backward, for a table whose model dim may be sharded
// (tensor parallel: E[V, D_Y]) and a batch whose rows may be (data parallel: tokens[B_X, W];
// sequence parallel: tokens[B_X, T_Y, W] for x[B_X, T_Y, D]; any leading dims are rows,
// nn/rows.hpp).
//
//   embedding_add(x, table, tokens, k)      x[r, d] += table[tokens[r, k], d]
//   embedding_gradient(dx, tokens, k, V)    dtable[v, d] = sum of dx[r, d] over the rows r whose
//                                           token is v: [V, D..]{U over B's axes, and dx's}, fp32
//
// The table is read whole along V (for FSDP, all-gather its V shards first), and its gradient is
// a partial sum over the axes that split the batch, since each rank saw only its rows, and over
// the axes dx itself may be a partial sum over (as in plain tensor parallelism): the caller
// reduces it onto the table's shards, e.g. with the adjoint of that AllGather (a ReduceScatter).
// The gradient is accumulated in fp32 whatever x's type: rows with the same token add up, in
// row order on the host, on a GPU in an order fixed by the tokens, without atomics
// (cuda/kernels/scatter_rows.hpp), so that the gradient repeats to the bit on either. Tokens
// must lie in [0, V); they are checked where they are made (the batch loader), since a kernel
// cannot report them. Everything runs in the tensors' memory space.
//
// A table may also carry x's first dim, split alike (E[S_P, V, D_Y] for x[S_P, B_X, D_Y]): a
// table per block of that dim, as a pipeline stacks its stages' layers (nn/pipeline.hpp). Each
// block's rows look up their own block's table, and embedding_gradient<S, V> gives the gradient
// [S_P, V, D_Y], a partial sum over the other rows' axes only. Each rank runs the kernels once per
// block of that dim it holds (one, for a stage dim split over the stages).
#pragma once

#include <cstdint>
#include <type_traits>

#include "tpx/core/compile_error.hpp"
#include "tpx/kernels/grid_terms.hpp"
#include "tpx/nn/rows.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::nn {

namespace detail {
// The tokens against x (or dx): the same rows, split alike.
template <class Xt, class Tok>
constexpr void check_embedding_operands() {
  static_assert(Xt::order >= 2, "tpx: embedding: x must be a [Rows..., Model] tensor");
  static_assert(Tok::order == Xt::order && std::is_same_v<row_dims_t<Tok>, row_dims_t<Xt>> &&
                    std::is_same_v<typename Tok::value_type, std::int32_t>,
                "tpx: embedding: the tokens must be int32 [Rows..., W], rows split like x's");
  static_assert(std::is_same_v<typename Tok::space, typename Xt::space>,
                "tpx: embedding: x and the tokens must be in the same memory space");
}

// embedding_gradient's two forms: the table's gradient, one per block of dx's first dim if
// Blocks.
template <bool Blocks, template <class...> class Vocab, AnyTensor Xt, AnyTensor Tok>
auto embedding_gradient_of(const Xt& dx, const Tok& tokens, std::int64_t column,
                           std::int64_t vocab) {
  check_embedding_operands<Xt, Tok>();
  using Model = last_dim_t<Xt>;
  using BlockDims =
      std::conditional_t<Blocks, type_list<type_at_t<0, typename Xt::dims>>, type_list<>>;
  using Grad = tensor_with_t<
      BasicTensor<typename Xt::space, float>, concat_t<BlockDims, type_list<Vocab<>, Model>>,
      unreduced_union_t<
          as_unreduced_t<remove_all_t<row_axes_t<Xt>, typename axes_of_dims<BlockDims>::type>>,
          typename Xt::unreduced>>;
  const std::int64_t model = dx.global_extent(Xt::order - 1);
  Grad grad = [&] {
    if constexpr (Blocks)
      return Grad(dx.context(),
                  typename Grad::shape_type(index_array<3>{dx.global_extent(0), vocab, model}));
    else
      return Grad(dx.context(), typename Grad::shape_type(index_array<2>{vocab, model}));
  }();
  const std::int64_t cols = local_cols(dx), tokens_cols = local_cols(tokens);
  for_each_row_block<Blocks>(dx, [&](std::int64_t first, std::int64_t rows, std::int64_t b) {
    Xt::space::scatter_add_rows(
        dx.context(), rows, cols, vocab,
        kernels::token_at{tokens.data() + first * tokens_cols, tokens_cols, column},
        kernels::element_at<typename Xt::value_type>{dx.data() + first * cols, cols},
        grad.data() + b * vocab * cols);
  });
  return grad;
}
}  // namespace detail

// x[r, d] += table[tokens[r, column], d]; table: [Vocab, Model] with Vocab unsplit and Model
// split like x's last dim, or [First, Vocab, Model] with x's first dim (a table per block of it).
template <AnyTensor Xt, AnyTensor Table, AnyTensor Tok>
void embedding_add(Xt& x, const Table& table, const Tok& tokens, std::int64_t column) {
  detail::check_embedding_operands<Xt, Tok>();
  if constexpr (!std::is_same_v<typename Xt::unreduced, Unreduced<>>)
    compile_error<"tpx: embedding_add: x " + Xt::notation +
                  " is a partial sum; the lookup adds whole rows to whole values (reshard it "
                  "first)">{};
  constexpr bool per_block = Table::order == 3;
  if constexpr (per_block && !std::is_same_v<type_at_t<0, typename Table::dims>,
                                             type_at_t<0, typename Xt::dims>>)
    compile_error<"tpx: embedding_add: a table " + Table::notation +
                  " per block must lead with the first dim of x " + Xt::notation +
                  ", split alike">{};
  static_assert(
      (Table::order == 2 || per_block) &&
          type_at_t<Table::order - 2, typename Table::dims>::axes::size == 0 &&
          std::is_same_v<type_at_t<Table::order - 1, typename Table::dims>, last_dim_t<Xt>>,
      "tpx: embedding_add: the table must be [Vocab, Model] (or [First, Vocab, Model] with x's "
      "first dim) with Vocab whole (gathered) and Model split like x's");
  static_assert(std::is_same_v<typename Table::space, typename Xt::space>,
                "tpx: embedding_add: x and the table must be in the same memory space");
  const std::int64_t cols = local_cols(x), tokens_cols = local_cols(tokens);
  const std::int64_t table_block = table.global_extent(Table::order - 2) * cols;
  for_each_row_block<per_block>(x, [&](std::int64_t first, std::int64_t rows, std::int64_t b) {
    Xt::space::for_each_element(
        x.context(), rows, cols,
        kernels::embedding_add<typename Xt::value_type, typename Table::value_type>{
            table.data() + b * table_block,
            kernels::token_at{tokens.data() + first * tokens_cols, tokens_cols, column}, cols,
            x.data() + first * cols});
  });
}

// The gradient of the table rows the lookup read: [Vocab, Model]{U over every Rows dim's axes},
// fp32. It is linear in dx, which may itself be a partial sum (the gradient of a stream
// replicated over Y in plain tensor parallelism, {U_Y}); the table's gradient is then partial
// over those axes too.
// Vocab is the template of the table's vocabulary dim (e.g. V), of global extent `vocab`.
template <template <class...> class Vocab, AnyTensor Xt, AnyTensor Tok>
auto embedding_gradient(const Xt& dx, const Tok& tokens, std::int64_t column, std::int64_t vocab) {
  return detail::embedding_gradient_of<false, Vocab>(dx, tokens, column, vocab);
}

// The same for a table per block of dx's first dim, which must be First:
// [First, Vocab, Model]{U over the other Rows dims' axes, and dx's}.
template <template <class...> class First, template <class...> class Vocab, AnyTensor Xt,
          AnyTensor Tok>
auto embedding_gradient(const Xt& dx, const Tok& tokens, std::int64_t column, std::int64_t vocab) {
  if constexpr (!same_dim_v<type_at_t<0, typename Xt::dims>, First<>>)
    compile_error<"tpx: embedding_gradient<" + First<>::name + ", " + Vocab<>::name + ">: dx " +
                  Xt::notation + " does not lead with dim " + First<>::name +
                  ", the dim with a table per block">{};
  else
    return detail::embedding_gradient_of<true, Vocab>(dx, tokens, column, vocab);
}

}  // namespace tpx::nn

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
}  // namespace detail

// x[r, d] += table[tokens[r, column], d]; table: [Vocab, Model] with Vocab unsplit and Model
// split like x's last dim.
template <AnyTensor Xt, AnyTensor Table, AnyTensor Tok>
void embedding_add(Xt& x, const Table& table, const Tok& tokens, std::int64_t column) {
  detail::check_embedding_operands<Xt, Tok>();
  if constexpr (!std::is_same_v<typename Xt::unreduced, Unreduced<>>)
    compile_error<"tpx: embedding_add: x " + Xt::notation +
                  " is a partial sum; the lookup adds whole rows to whole values (reshard it "
                  "first)">{};
  static_assert(Table::order == 2 && type_at_t<0, typename Table::dims>::axes::size == 0 &&
                    std::is_same_v<type_at_t<1, typename Table::dims>, last_dim_t<Xt>>,
                "tpx: embedding_add: the table must be [Vocab, Model] with Vocab whole (gathered) and "
                "Model split like x's");
  static_assert(std::is_same_v<typename Table::space, typename Xt::space>,
                "tpx: embedding_add: x and the table must be in the same memory space");
  const std::int64_t cols = local_cols(x);
  Xt::space::for_each_element(
      x.context(), local_rows(x), cols,
      kernels::embedding_add<typename Xt::value_type, typename Table::value_type>{
          table.data(), kernels::token_at{tokens.data(), local_cols(tokens), column}, cols, x.data()});
}

// The gradient of the table rows the lookup read: [Vocab, Model]{U over every Rows dim's axes},
// fp32. It is linear in dx, which may itself be a partial sum (the gradient of a stream
// replicated over Y in plain tensor parallelism, {U_Y}); the table's gradient is then partial
// over those axes too.
// Vocab is the template of the table's vocabulary dim (e.g. V), of global extent `vocab`.
template <template <class...> class Vocab, AnyTensor Xt, AnyTensor Tok>
auto embedding_gradient(const Xt& dx, const Tok& tokens, std::int64_t column, std::int64_t vocab) {
  detail::check_embedding_operands<Xt, Tok>();
  using Model = last_dim_t<Xt>;
  using Grad =
      tensor_with_t<BasicTensor<typename Xt::space, float>, type_list<Vocab<>, Model>,
                    unreduced_union_t<as_unreduced_t<row_axes_t<Xt>>, typename Xt::unreduced>>;
  Grad grad(dx.context(), typename Grad::shape_type(
                              index_array<2>{vocab, dx.global_extent(Xt::order - 1)}));
  const std::int64_t cols = local_cols(dx);
  Xt::space::scatter_add_rows(dx.context(), local_rows(dx), cols, vocab,
                              kernels::token_at{tokens.data(), local_cols(tokens), column},
                              kernels::element_at<typename Xt::value_type>{dx.data(), cols},
                              grad.data());
  return grad;
}

}  // namespace tpx::nn

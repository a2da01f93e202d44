// A tensor [Rows..., Last] seen as a matrix of rows: the view every row-wise layer of tpx/nn takes
// (RMSNorm over D, the loss over V, the embedding's rows, attention's scores over S).
//
//   x[B_X, T_Y, D]  ->  local rows B_local x T_local, each of D_local contiguous elements
//
// A rank's block is row-major, so its rows over all leading dims are contiguous runs of the last
// dim's local extent, whatever the number of leading dims and their splits: a layer written for
// [Rows, Cols] runs unchanged on [B, T, D] with rows = B_local * T_local. What is per row (a
// norm's statistics, a loss term) is a tensor over the leading dims, split like them; a sum over
// rows (a weight gradient) is a partial sum over every axis that splits a leading dim.
#pragma once

#include <cstdint>
#include <utility>

#include "tpx/core/type_list.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::nn {

namespace detail {
template <class Dims, class Indices>
struct leading_dims;
template <class Dims, std::size_t... I>
struct leading_dims<Dims, std::index_sequence<I...>> {
  using type = type_list<type_at_t<I, Dims>...>;
};
template <class Dims>
struct axes_of_dims;
template <class... Dims>
struct axes_of_dims<type_list<Dims...>> {
  using type = unique_t<concat_t<type_list<>, typename Dims::axes...>>;
};
}  // namespace detail

// The leading dims of Tn (all but the last), as they are split.
template <AnyTensor Tn>
using row_dims_t =
    typename detail::leading_dims<typename Tn::dims, std::make_index_sequence<Tn::order - 1>>::type;

// Tn's last dim, as it is split.
template <AnyTensor Tn>
using last_dim_t = type_at_t<Tn::order - 1, typename Tn::dims>;

// Every mesh axis that splits a leading dim of Tn: what a sum over rows is partial over.
template <AnyTensor Tn>
using row_axes_t = typename detail::axes_of_dims<row_dims_t<Tn>>::type;

// The tensor of one element of type T per row of Tn, in Tn's memory space, unreduced over Unred.
template <AnyTensor Tn, class T = float, class Unred = Unreduced<>>
using per_row_t = tensor_with_t<BasicTensor<typename Tn::space, T>, row_dims_t<Tn>, Unred>;

// How many rows this rank's block of t has, and how long they are.
template <AnyTensor Tn>
std::int64_t local_rows(const Tn& t) {
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < Tn::order; ++d) rows *= t.local_extent(d);
  return rows;
}
template <AnyTensor Tn>
std::int64_t local_cols(const Tn& t) {
  return t.local_extent(Tn::order - 1);
}
// How many rows t has in all.
template <AnyTensor Tn>
std::int64_t global_rows(const Tn& t) {
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < Tn::order; ++d) rows *= t.global_extent(d);
  return rows;
}

// fn(first_row, rows, block) for each run of t's local rows that one block of a weight stacked
// over t's first dim serves (a pipeline's layers stacked over its stage dim): each local block b
// of that dim in turn when PerBlock, else all the rows at once as block 0.
template <bool PerBlock, AnyTensor Tn, class Fn>
void for_each_row_block(const Tn& t, const Fn& fn) {
  const std::int64_t rows = local_rows(t);
  if constexpr (!PerBlock) {
    fn(std::int64_t{0}, rows, std::int64_t{0});
  } else {
    const std::int64_t blocks = t.local_extent(0);
    for (std::int64_t b = 0; b < blocks; ++b) fn(b * (rows / blocks), rows / blocks, b);
  }
}

// An unwritten Result (a per_row_t of t) with t's leading global extents, for reduce_rows to
// fill: it writes every row.
template <AnyTensor Result, AnyTensor Tn>
Result make_per_row(const Tn& t) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return Result(t.context(),
                  typename Result::shape_type(index_array<sizeof...(I)>{t.global_extent(I)...}),
                  for_overwrite);
  }
  (std::make_index_sequence<Tn::order - 1>{});
}

}  // namespace tpx::nn

// sum<D>(t): a tensor summed over one of its dims, the partial sums left unreduced over the mesh
// axes that split D, as the notes write it.
//
//   auto total = tpx::sum<S>(losses);          // [S_P] -> []{U_P}
//   auto loss = tpx::all_reduce<P>(total);     // []: the same number on every rank
//   auto col = tpx::sum<B>(x);                 // [B_X, D_Y] -> [D_Y]{U_X}
//
// Each rank sums the elements it holds, so the result is a partial sum over D's axes until the
// caller reduces it: no collective runs behind the call, and the type says which one is owed.
// A pipeline's per-stage losses ([S_P], nn::cross_entropy_per) are the first use: each stage
// holds its own, and one all-reduce over P after the step gives every rank the total.
//
// It is einsum's contraction of D with a vector of ones split as D is in t, so it takes
// einsum's kernels (one GEMM per rank, on the host and on the GPU, the ones made in the tensor's
// own memory space) and its rules: a t unreduced over an axis of D's split is rejected there. A
// dim t lacks is a compile error naming it.
#pragma once

#include "tpx/core/compile_error.hpp"
#include "tpx/core/type_list.hpp"
#include "tpx/kernels/elementwise.hpp"
#include "tpx/ops/einsum.hpp"
#include "tpx/ops/elementwise.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

template <Dim D, AnyTensor Tn>
auto sum(const Tn& t) {
  constexpr int at = dim_position_v<D, typename Tn::dims>;
  if constexpr (at < 0) {
    compile_error<"tpx: sum<" + D::name + ">: tensor " + Tn::notation + " has no dim " + D::name>{};
  } else {
    using Split = type_at_t<static_cast<std::size_t>(at), typename Tn::dims>;
    using Vector = BasicTensor<typename Tn::space, typename Tn::value_type, Split>;
    const Vector zeros(t.context(), {unsplit_t<Split>(t.global_extent(at))});
    return einsum<D>(t, map(kernels::add_scalar{1.0f}, zeros));
  }
}
template <template <class...> class D, AnyTensor Tn>
auto sum(const Tn& t) {
  return sum<D<>>(t);
}

}  // namespace tpx

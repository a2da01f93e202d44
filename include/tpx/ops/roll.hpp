// Rolling a dim's blocks along a mesh axis: the collective that moves blocks from rank to rank
// without changing what the type says, the typed form of JAX's ppermute by a shift (and of the
// send to the next stage and the receive from the previous one of a pipeline, or the pass of a
// key block around a ring).
//
//   roll<X, D>(t, k)   [.., D_..X, ..] -> the same type: out's X-block r is t's X-block r - k
//                      (mod n, the ranks of X), so rank r's block goes to rank r + k; with D split
//                      over X alone, numpy.roll(t, k * block, D) of the global tensor. Where axes
//                      before X split D too, each of their blocks rolls its own X-blocks.
//
// The global tensor changes (its blocks are in a new order) but its type does not, so the type
// stays true: a block of D_X on rank r is still block r of D. Rolling is linear, so a partial sum
// rolls to a partial sum and {U_..} is kept; its adjoint is roll<X, D>(dout, -k). The blocks must
// be equal (D's extent a multiple of the ranks of X): blocks of two sizes would not fit the
// ranks they move to, which is a run-time error naming the dim, the axis and the extents. The
// exchange is the communicator's all_to_all with one nonzero count per rank (NCCL then sends
// and receives once, host and MPI copy once); k a multiple of n, or an axis of one rank, moves
// no data between ranks (an rvalue's buffer is handed on; an lvalue is copied on its rank).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tpx/ops/collectives.hpp"

namespace tpx {

namespace detail {

// k places along n ranks, as a shift in [0, n).
inline int roll_shift(int k, int n) { return ((k % n) + n) % n; }

// roll<A, D>'s checks at compile time: D is a dim of Tn split over A, A its innermost split.
template <MeshAxis A, Dim D, AnyTensor Tn>
constexpr bool check_roll() {
  using q = axis_query<Tn, A>;
  constexpr int k = checked_dim_position<Tn, D>();
  if constexpr (k >= 0 && q::dim != k)
    compile_error<"tpx: roll<" + A::name + ", " + D::name + ">: dim " + D::name + " of " +
                  Tn::notation + " is not split over mesh axis " + A::name +
                  " (roll moves the blocks of a split dim)">{};
  else if constexpr (k >= 0 && !q::innermost)
    compile_error<"tpx: roll<" + A::name + ", " + D::name + ">: mesh axis " + A::name +
                  " is not the innermost split of dim " + D::name + " in " + Tn::notation>{};
  return k >= 0 && q::dim == k && q::innermost;
}

// The extent of D's block over the axes before A, checked to split into equal blocks over A.
template <MeshAxis A, Dim D, AnyTensor Tn>
void check_equal_blocks(const Tn& t, int parts) {
  constexpr int k = checked_dim_position<Tn, D>();
  using dim = type_at_t<k, typename Tn::dims>;
  const block parent =
      block_over(t.context(), t.global_extent(k), typename without_axis_t<A, dim>::axes{});
  if (parent.size % parts != 0)
    throw std::invalid_argument(
        std::string("tpx: roll<") + A::name.c_str() + ", " + D::name.c_str() + ">: dim " +
        D::name.c_str() + " of " + Tn::notation.c_str() + " has " + std::to_string(parent.size) +
        " elements to split over the " + std::to_string(parts) + " ranks of mesh axis " +
        A::name.c_str() + ", not a multiple: blocks of two sizes cannot trade places");
}

}  // namespace detail

template <MeshAxis A, Dim D, AnyTensor Tn>
auto roll(const Tn& t, int k) {
  if constexpr (detail::check_roll<A, D, Tn>()) {
    const rank_context& ctx = t.context();
    any_communicator& comm = ctx.template group<A>();
    const int parts = comm.size();
    detail::check_equal_blocks<A, D>(t, parts);
    const int shift = detail::roll_shift(k, parts);
    Tn out(ctx, typename Tn::shape_type(t.global_extents()), for_overwrite);
    std::vector<std::size_t> counts(static_cast<std::size_t>(parts) * parts, 0);
    for (int from = 0; from < parts; ++from)
      counts[from * parts + (from + shift) % parts] = static_cast<std::size_t>(t.size());
    comm.all_to_all(t.elements(), out.elements(), counts);
    return out;
  }
}

template <MeshAxis A, Dim D, detail::handed_over Tn>
auto roll(Tn&& t, int k) {
  if constexpr (detail::check_roll<A, D, Tn>()) {
    const int parts = t.context().template group<A>().size();
    if (detail::roll_shift(k, parts) != 0) return roll<A, D>(std::as_const(t), k);
    detail::check_equal_blocks<A, D>(t, parts);  // refused as the exchange would refuse it
    return Tn(relabel_t{}, std::move(t));
  }
}

template <MeshAxis A, template <class...> class D, class Tn>
auto roll(Tn&& t, int k) {
  return roll<A, D<>>(std::forward<Tn>(t), k);
}

}  // namespace tpx

// Rotary position embedding (RoPE; Llama's, GPT-NeoX's) of attention's queries and keys, with
// batch, heads and positions split over mesh axes and no communication.
//
//   // q[B_X, T, H_Y, E] and k[B_X, S, H_Y, E] as projected
//   q = tpx::nn::rotary_forward<T>(std::move(q));
//   k = tpx::nn::rotary_forward<S>(std::move(k));
//   ...
//   dq = tpx::nn::rotary_backward<T>(std::move(dq));   // the gradient at the projection's output
//
// Each head's pair (i, i + E/2) at position p turns by p * base^(-2i/E) (kernels/rotary.hpp has
// the math and the layout), so attention's scores depend on how far a key is from its query, not
// on where either is. The position dim is named (T for queries, S for keys) and may sit anywhere
// but last; every dim after it but the last (the heads) and before it (the batch) is whole rows of
// the same position. A rank rotates its own block in place: a row's position is its index along
// the position dim plus the block's global offset there, so positions may be split too (context
// parallelism's query and key blocks) and the result is the unsplit computation's; a sequence in
// the load-balanced order, each rank two chunks (nn/sequence_order.hpp), says so by type:
// rotary_forward<T, load_balanced<X>>(q). The head dim E
// must be whole on every rank, since a pair spans both halves of it: a split is a compile error
// naming the dim and the axes. The rotation is linear, so a partial sum ({U_Y}: a gradient
// before its reduction) rotates as it is. The backward pass is the inverse rotation, and the
// layer has no weights.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tpx/core/compile_error.hpp"
#include "tpx/core/type_list.hpp"
#include "tpx/kernels/rotary.hpp"
#include "tpx/nn/sequence_order.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::nn {

// Llama 2's and GPT-NeoX's base: pair i turns base^(-2i/E) radians per position.
inline constexpr float rotary_default_base = 10000.0f;

namespace detail {

template <template <class...> class Position, class Tn>
constexpr int rotary_position_index() {
  using names = typename remove_all_axes<typename Tn::dims>::type;
  constexpr int position = index_of_v<Position<>, names>;
  using head = type_at_t<Tn::order - 1, typename Tn::dims>;
  if constexpr (position < 0 || position == Tn::order - 1) {
    compile_error<"tpx: rotary: tensor " + Tn::notation + " has no position dim " +
                  Position<>::name + " before its last (head) dim">{};
  } else if constexpr (head::axes::size != 0) {
    compile_error<"tpx: rotary: head dim " + head::name + " of " + Tn::notation +
                  " is split over mesh axes " + tpx::detail::axis_list<typename head::axes>() +
                  "; a rotated pair spans both halves of a head, so it must be whole on every "
                  "rank">{};
  }
  return position;
}

// Turns every pair of x's block by direction times its angle.
template <template <class...> class Position, class Order, AnyTensor Tn>
void rotate(Tn& x, float base, float direction, const char* who) {
  constexpr int position = rotary_position_index<Position, Tn>();
  static_assert(check_order_split<Order, static_cast<std::size_t>(position), Tn, "rotary">());
  const std::int64_t width = x.local_extent(Tn::order - 1);
  if (width % 2 != 0)
    throw std::invalid_argument(std::string("tpx: ") + who + ": head dim of " +
                                Tn::notation.c_str() + " has odd width " + std::to_string(width) +
                                "; rotary embedding turns pairs of a head's elements");
  if (!(base > 1.0f) || !std::isfinite(base))
    throw std::invalid_argument(std::string("tpx: ") + who + ": base " + std::to_string(base) +
                                " must be a finite number above 1");
  std::int64_t rows = 1, inner = 1;
  for (std::size_t d = 0; d + 1 < Tn::order; ++d) {
    rows *= x.local_extent(d);
    if (d > static_cast<std::size_t>(position)) inner *= x.local_extent(d);
  }
  const local_positions runs = positions_of<Order, static_cast<std::size_t>(position)>(x, who);
  if (rows == 0 || width == 0) return;
  const position_run& second = runs.runs[runs.count - 1];
  Tn::space::for_each_element(
      x.context(), rows, width / 2,
      kernels::rotary_turn<typename Tn::value_type>{
          x.data(), width, inner, x.local_extent(position), runs.runs[0].position,
          runs.count == 1 ? x.local_extent(position) : second.index, second.position,
          std::log2(base), direction});
}

}  // namespace detail

// x with each head's pairs turned by their position's angles (x's buffer, rotated in place: pass
// std::move(x) unless x must stay). Order says which positions the position dim holds
// (nn/sequence_order.hpp: load_balanced<C> for context parallelism's balanced blocks).
template <template <class...> class Position, class Order = contiguous_positions, AnyTensor Tn>
Tn rotary_forward(Tn x, float base = rotary_default_base) {
  detail::rotate<Position, Order>(x, base, 1.0f, "rotary_forward");
  return x;
}

// The gradient at rotary_forward's input from the one at its output: dy turned back.
template <template <class...> class Position, class Order = contiguous_positions, AnyTensor Tn>
Tn rotary_backward(Tn dy, float base = rotary_default_base) {
  detail::rotate<Position, Order>(dy, base, -1.0f, "rotary_backward");
  return dy;
}

}  // namespace tpx::nn

// How a sequence's positions lie along its dim: the orders that the layers which depend on
// positions (nn/rotary.hpp, nn/fused_attention.hpp) take as a template argument.
//
//   contiguous_positions   the default: the dim's index is the position, so a rank of the C ranks
//                          along the dim's axes holds one block of consecutive positions
//                          (sharding/split.hpp).
//   load_balanced<X...>    Megatron-LM's and Llama 3's order for causal context parallelism over
//                          the axes X...: the sequence of n positions is cut into 2C chunks of
//                          n / (2C) and the dim holds them in the order 0, 2C-1, 1, 2C-2, ..., so
//                          that split over X... like any dim, rank c holds chunks c and 2C-1-c.
//
// Causal attention's query at position p sees p + 1 keys, so with contiguous blocks the rank
// holding the sequence's end does the most work (C = 4: 7/16 of the visible pairs, the first rank
// 1/16) and sets the step's pace; with the balanced order every rank's two chunks see the same
// number of keys, c^2 (2C - 1) + c (c + 1) for chunks of c. The order is a promise about the
// data: whoever loads the sequence puts position load_balanced_position(i, n, C) at index i (the
// GPT's loader, examples/gpt), and since an order changes what a dim's index means, the layers
// take it as a type, never as a run-time flag: `rotary_forward<T, load_balanced<X>>(q)`,
// `fused_causal_attention_forward<load_balanced<X>>(q, k, v)`. With load_balanced<X...> the
// sequence dim of a split operand must be split over exactly X... (a compile error naming the dim
// and its axes otherwise), and its extent must be a multiple of 2C (a run-time error naming it).
// A dim that is whole on every rank (the keys, once all-gathered over X) holds the whole sequence
// in the same order: copy_in_position_order and copy_in_order move it to and from the order of
// positions (one box copy per chunk, in the tensor's memory space).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tpx/core/compile_error.hpp"
#include "tpx/core/type_list.hpp"
#include "tpx/sharding/mesh_axis.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::nn {

struct contiguous_positions {};

template <MeshAxis... Axes>
struct load_balanced {
  static_assert(sizeof...(Axes) > 0, "tpx: load_balanced<Axes...> names the axes that split the "
                                     "sequence (context parallelism's), at least one");
};

// The position at index i of a sequence of n positions in the balanced order over `ranks`
// ranks (n a multiple of 2 ranks).
constexpr std::int64_t load_balanced_position(std::int64_t i, std::int64_t n, std::int64_t ranks) {
  const std::int64_t chunk = n / (2 * ranks);
  const std::int64_t slot = i / chunk, rank = slot / 2;
  const std::int64_t placed = slot % 2 == 0 ? rank : 2 * ranks - 1 - rank;
  return placed * chunk + i % chunk;
}

// A run of consecutive positions in a rank's block of a sequence dim: `length` indexes from the
// block's local index `index` on hold the positions from `position` on.
struct position_run {
  std::int64_t index = 0;
  std::int64_t length = 0;
  std::int64_t position = 0;
};

// A rank's block as runs: one for contiguous_positions, two (its chunks) for load_balanced.
struct local_positions {
  std::array<position_run, 2> runs{};
  int count = 0;
};

namespace detail {

template <class Order>
inline constexpr bool is_load_balanced_v = false;
template <class... Axes>
inline constexpr bool is_load_balanced_v<load_balanced<Axes...>> = true;

template <class Order>
struct order_axes {
  using type = type_list<>;
};
template <class... Axes>
struct order_axes<load_balanced<Axes...>> {
  using type = type_list<Axes...>;
};

template <class Order>
constexpr bool check_order() {
  static_assert(std::is_same_v<Order, contiguous_positions> || is_load_balanced_v<Order>,
                "tpx: a sequence order is tpx::nn::contiguous_positions or "
                "tpx::nn::load_balanced<Axes...>");
  return true;
}

// "tpx: who of [B, T_X, ...] (rank r): ", the start of an error about t in layer `who`.
template <AnyTensor Tn>
std::string error_prefix(const Tn& t, const char* who) {
  return std::string("tpx: ") + who + " of " + Tn::notation.c_str() + " (rank " +
         std::to_string(t.context().world_rank()) + "): ";
}

// Order's promise checked against dim D of Tn at compile time: a balanced sequence split over
// other axes than the order's is an error naming the dim and both sets of axes.
template <class Order, std::size_t D, class Tn, fixed_string Who>
constexpr bool check_order_split() {
  check_order<Order>();
  using dim = type_at_t<D, typename Tn::dims>;
  using axes = typename order_axes<Order>::type;
  if constexpr (!is_load_balanced_v<Order> || std::is_same_v<typename dim::axes, axes>)
    return true;
  else if constexpr (dim::axes::size == 0)
    compile_error<"tpx: " + Who + ": sequence dim " + dim::name + " of " + Tn::notation +
                  " is whole on every rank, but load_balanced<" + tpx::detail::axis_list<axes>() +
                  "> orders a sequence split over those axes">{};
  else
    compile_error<"tpx: " + Who + ": sequence dim " + dim::name + " of " + Tn::notation +
                  " is split over mesh axes " + tpx::detail::axis_list<typename dim::axes>() +
                  ", but load_balanced<" + tpx::detail::axis_list<axes>() +
                  "> orders a sequence split over those axes">{};
  return true;
}

// The number of ranks along Order's axes (1 for contiguous_positions).
template <class Order>
int order_ranks(const rank_context& ctx) {
  return [&]<class... Axes>(type_list<Axes...>) {
    return (1 * ... * ctx.axis<Axes>().size);
  }(typename order_axes<Order>::type{});
}

// Order's chunk for t's sequence of n positions, checked: n / (2C) for load_balanced. The error
// names `who` (the layer), t and the rank.
template <class Order, AnyTensor Tn>
std::int64_t order_chunk(const Tn& t, std::int64_t n, const char* who) {
  const std::int64_t ranks = order_ranks<Order>(t.context());
  if (n % (2 * ranks) != 0)
    throw std::invalid_argument(error_prefix(t, who) + "a load-balanced sequence of " +
                                std::to_string(n) +
                                " positions cannot be cut into 2 x " + std::to_string(ranks) +
                                " chunks of one length (one chunk at each end for each of the " +
                                std::to_string(ranks) + " ranks); make it a multiple of " +
                                std::to_string(2 * ranks));
  return n / (2 * ranks);
}

// A copy of t with the `chunks` chunks of dim D moved: chunk j of the result is chunk
// from_slot(j) of t. Dims before D and after it are kept whole.
template <std::size_t D, AnyTensor Tn, class Slot>
Tn moved_chunks(const Tn& t, std::int64_t chunks, Slot from_slot) {
  using Space = typename Tn::space;
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < Tn::order; ++d) {
    if (d < D) outer *= t.local_extent(d);
    if (d > D) inner *= t.local_extent(d);
  }
  const std::int64_t n = t.local_extent(D), chunk = chunks > 0 ? n / chunks : 0;
  Tn out(t.context(), t.shape(), for_overwrite);
  const std::array<std::int64_t, 3> shape{outer, n, inner}, box{outer, chunk, inner};
  for (std::int64_t j = 0; j < chunks && chunk > 0 && outer * inner > 0; ++j)
    Space::copy_box(t.context(), t.data(), shape, {0, from_slot(j) * chunk, 0}, out.data(), shape,
                    {0, j * chunk, 0}, box);
  return out;
}

}  // namespace detail

// The runs of positions of t's block along dim D in Order, checked (`who` names the layer in
// errors).
template <class Order, std::size_t D, AnyTensor Tn>
local_positions positions_of(const Tn& t, const char* who) {
  detail::check_order<Order>();
  const std::int64_t length = t.local_extent(D);
  if constexpr (std::is_same_v<Order, contiguous_positions>) {
    return {{position_run{0, length, t.local_offset(D)}}, 1};
  } else {
    const std::int64_t chunk = detail::order_chunk<Order>(t, t.global_extent(D), who);
    if (chunk == 0) return {{position_run{}, position_run{}}, 2};
    const std::int64_t n = t.global_extent(D), first = t.local_offset(D);
    if (length != 2 * chunk || first % (2 * chunk) != 0)  // a dim split over other axes too
      throw std::invalid_argument(detail::error_prefix(t, who) + "the rank's block of " +
                                  std::to_string(length) +
                                  " positions from index " + std::to_string(first) +
                                  " is not two chunks of " + std::to_string(chunk) +
                                  " of the balanced order");
    const std::int64_t ranks = n / (2 * chunk);
    return {{position_run{0, chunk, load_balanced_position(first, n, ranks)},
             position_run{chunk, chunk, load_balanced_position(first + chunk, n, ranks)}},
            2};
  }
}

// t, whose dim D holds a whole sequence in Order, copied into the order of positions (t itself,
// uncopied, for contiguous_positions).
template <class Order, std::size_t D, AnyTensor Tn>
decltype(auto) copy_in_position_order(const Tn& t, const char* who) {
  detail::check_order<Order>();
  if constexpr (std::is_same_v<Order, contiguous_positions>) {
    return t;
  } else {
    const std::int64_t ranks = detail::order_ranks<Order>(t.context());
    detail::order_chunk<Order>(t, t.local_extent(D), who);
    // Position chunk j stands at slot 2j (j < C) or 2 (2C - 1 - j) + 1 of the order.
    return detail::moved_chunks<D>(t, 2 * ranks, [ranks](std::int64_t j) {
      return j < ranks ? 2 * j : 2 * (2 * ranks - 1 - j) + 1;
    });
  }
}

// The inverse for a load-balanced Order: t, whose dim D holds a whole sequence in the order of
// positions, copied into Order.
template <class Order, std::size_t D, AnyTensor Tn>
Tn copy_in_order(const Tn& t, const char* who) {
  static_assert(detail::is_load_balanced_v<Order>,
                "tpx: copy_in_order moves a sequence into a load_balanced<Axes...> order");
  const std::int64_t ranks = detail::order_ranks<Order>(t.context());
  const std::int64_t n = t.local_extent(D);
  const std::int64_t chunk = detail::order_chunk<Order>(t, n, who);
  return detail::moved_chunks<D>(t, 2 * ranks, [=](std::int64_t slot) {
    return chunk > 0 ? load_balanced_position(slot * chunk, n, ranks) / chunk : 0;
  });
}

}  // namespace tpx::nn

// The collectives as typed operations on tensors: what each does to the type is checked at
// compile time, what it does to the numbers happens on the communicator of the axis.
//
//   all_gather<X>(t)            [B_X, D]      -> [B, D]        X must be B's innermost split
//   reduce_scatter<X, D>(t)     [B, D]{U_X}   -> [B, D_X]
//   all_reduce<X>(t)            [B, D]{U_X}   -> [B, D]
//   all_reduce_max<X>(t)        [B, D]{U_X}   -> [B, D]        the maximum over X, not the sum
//   all_to_all<X, B, D>(t)      [B_X, D]      -> [B, D_X]
//   slice<X, D>(t)              [B, D]        -> [B, D_X]      local: keep this rank's block
//                                                              (slice<X, D>(rank, t): X checked
//                                                              against the mesh at compile time)
//   embed<X, D>(t)              [B, D_X]      -> [B, D]{U_X}   local: block into zeros
//   roll<X, D>(t, k)            [B, D_X]      -> [B, D_X]      block r to rank r + k
//                                                              (ops/roll.hpp)
//
// all_reduce_max reads {U_X} as "each rank holds a partial maximum over X" (say the row maxima of
// its block of logits whose vocabulary is split over X, for a vocab-parallel softmax): the type
// records that the values differ along X and must be combined, not how, so such a tensor must
// go to all_reduce_max and nowhere else (an implicit reduction or all_reduce would sum it).
//
// Dims can be given as templates (reduce_scatter<X, D>) or as types (reduce_scatter<X, D<>>).
// Any dim may be the one gathered or scattered, not only the outermost: blocks of an inner dim
// are packed into contiguous buffers before the communicator sees them and unpacked after, with
// the memory space's copy_box (tensor/host_space.hpp), so the same code serves every backend.
// Uneven blocks (extents that do not divide) are handled by per-rank counts.
//
// all_gather, reduce_scatter, all_reduce and all_reduce_max given an rvalue (a result passed on,
// or std::move(t)) over an axis of one rank (every axis of a 1x1 mesh) run no collective: the
// operand's block is the result's, so its buffer moves into the result, where an lvalue is
// copied (a communicator of one rank copies). At GPT-2's shape on one GPU that is each
// sequence-parallel gather and scatter of a block's activations not copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpx/comm/communicator.hpp"
#include "tpx/core/compile_error.hpp"
#include "tpx/ops/target_axes.hpp"
#include "tpx/sharding/sharding.hpp"
#include "tpx/sharding/split.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

namespace detail {

// This rank's block of a dim of the given global extent, split over Axes in order.
template <class... Axes>
block block_over(const rank_context& ctx, std::int64_t global, type_list<Axes...>) {
  block b{0, global};
  ((b = split_block(b, ctx.axis<Axes>().size, ctx.axis<Axes>().coord)), ...);
  return b;
}

template <class Tn, class A>
struct axis_query {
  using universe = unique_t<concat_t<typename Tn::traits::axes, type_list<A>>>;
  static constexpr sharding_desc desc = Tn::traits::parts::template describe<universe>();
  static constexpr int id = index_of_v<A, universe>;
  static constexpr int dim = desc.dim_of_axis(id);
  static constexpr bool unreduced = desc.is_unreduced(id);
  static constexpr bool innermost = dim >= 0 && desc.axis[dim][desc.n_axes[dim] - 1] == id;
};

template <class Tn, class D>
constexpr int checked_dim_position() {
  constexpr int k = dim_position_v<D, typename Tn::dims>;
  if constexpr (k < 0) compile_error<"tpx: tensor " + Tn::notation + " has no dim " + D::name>{};
  return k;
}

template <std::size_t N>
index_array<N> with_entry(index_array<N> a, std::size_t k, std::int64_t v) {
  a[k] = v;
  return a;
}

// An operand that is an rvalue, and may therefore give up its buffer.
template <class Tn>
concept handed_over = AnyTensor<Tn> && !std::is_lvalue_reference_v<Tn> && !std::is_const_v<Tn>;

// collective(t), or, when axis A has one rank, t's buffer under the result's type: the block is
// the same, and nothing needs exchanging.
template <MeshAxis A, class Tn, class Collective>
auto unless_one_rank(Tn&& t, Collective collective) {
  using Result = decltype(collective(std::as_const(t)));
  if (t.context().template group<A>().size() == 1) return Result(relabel_t{}, std::move(t));
  return collective(std::as_const(t));
}

}  // namespace detail

// [.., D_..X, ..] -> [.., D_.., ..]: every rank along X ends with the whole of D's X-blocks.
template <MeshAxis A, AnyTensor Tn>
auto all_gather(const Tn& t) {
  using q = detail::axis_query<Tn, A>;
  if constexpr (q::unreduced)
    compile_error<"tpx: all_gather<" + A::name + ">: tensor " + Tn::notation +
                  " is unreduced over " + A::name + ", not sharded: use all_reduce<" + A::name +
                  "> or reduce_scatter<" + A::name + ", Dim>">{};
  else if constexpr (q::dim < 0)
    compile_error<"tpx: all_gather<" + A::name + ">: tensor " + Tn::notation +
                  " is not sharded over mesh axis " + A::name>{};
  else if constexpr (!q::innermost)
    compile_error<"tpx: all_gather<" + A::name + ">: mesh axis " + A::name +
                  " is not the innermost split of dim " +
                  type_at_t<q::dim, typename Tn::dims>::name + " in " + Tn::notation +
                  " (gather the axes after it first, or use reshard)">{};
  if constexpr (q::dim >= 0 && q::innermost && !q::unreduced) {
    constexpr std::size_t k = q::dim;
    using old_dim = type_at_t<k, typename Tn::dims>;
    using Result =
        tensor_with_t<Tn, replace_dim_t<typename Tn::dims, old_dim, without_axis_t<A, old_dim>>,
                      typename Tn::unreduced>;
    const rank_context& ctx = t.context();
    Result out(ctx, typename Result::shape_type(t.global_extents()), for_overwrite);
    any_communicator& comm = ctx.template group<A>();
    const int parts = comm.size();
    const block parent =
        detail::block_over(ctx, t.global_extent(k), typename without_axis_t<A, old_dim>::axes{});
    const std::int64_t others = element_count(detail::with_entry(t.local_extents(), k, 1));
    std::vector<std::size_t> counts(parts);
    for (int r = 0; r < parts; ++r)
      counts[r] = static_cast<std::size_t>(split_block(parent.size, parts, r).size * others);
    if (k == 0 || parts == 1) {  // the blocks arrive in out's layout
      comm.all_gather(t.elements(), out.elements(), counts);
      return out;
    }
    auto gathered =
        Tn::space::template make_buffer_for_overwrite<typename Tn::value_type>(ctx, out.size());
    comm.all_gather(t.elements(), std::span(gathered.data(), gathered.size()), counts);
    std::size_t at = 0;
    for (int r = 0; r < parts; ++r) {
      const block piece = split_block(parent.size, parts, r);
      const auto piece_shape = detail::with_entry(t.local_extents(), k, piece.size);
      Tn::space::copy_box(
          ctx, gathered.data() + at, piece_shape, {}, out.data(), out.local_extents(),
          detail::with_entry(index_array<Tn::order>{}, k, piece.offset), piece_shape);
      at += counts[r];
    }
    return out;
  }
}

template <MeshAxis A, detail::handed_over Tn>
auto all_gather(Tn&& t) {
  return detail::unless_one_rank<A>(std::move(t), [](const Tn& u) { return all_gather<A>(u); });
}

// [.., D_.., ..]{U_X} -> [.., D_..X, ..]: sum the partial sums over X, each rank keeping its
// block of D.
template <MeshAxis A, Dim D, AnyTensor Tn>
auto reduce_scatter(const Tn& t) {
  using q = detail::axis_query<Tn, A>;
  constexpr int k = detail::checked_dim_position<Tn, D>();
  if constexpr (!q::unreduced)
    compile_error<"tpx: reduce_scatter<" + A::name + ", " + D::name + ">: tensor " + Tn::notation +
                  " is not unreduced over " + A::name + " (nothing to reduce)">{};
  if constexpr (q::unreduced && k >= 0) {
    using old_dim = type_at_t<k, typename Tn::dims>;
    using Result =
        tensor_with_t<Tn,
                      replace_dim_t<typename Tn::dims, old_dim, with_axis_appended_t<A, old_dim>>,
                      unreduced_without_t<typename Tn::unreduced, A>>;
    const rank_context& ctx = t.context();
    Result out(ctx, typename Result::shape_type(t.global_extents()), for_overwrite);
    any_communicator& comm = ctx.template group<A>();
    const int parts = comm.size();
    const std::int64_t extent = t.local_extent(k);
    const std::int64_t others = element_count(detail::with_entry(t.local_extents(), k, 1));
    std::vector<std::size_t> counts(parts);
    for (int r = 0; r < parts; ++r)
      counts[r] = static_cast<std::size_t>(split_block(extent, parts, r).size * others);
    if (k == 0 || parts == 1) {  // t's layout is already the packed one
      comm.reduce_scatter(t.elements(), out.elements(), counts);
      return out;
    }
    auto packed =
        Tn::space::template make_buffer_for_overwrite<typename Tn::value_type>(ctx, t.size());
    std::size_t at = 0;
    for (int r = 0; r < parts; ++r) {
      const block piece = split_block(extent, parts, r);
      const auto piece_shape = detail::with_entry(t.local_extents(), k, piece.size);
      Tn::space::copy_box(ctx, t.data(), t.local_extents(),
                          detail::with_entry(index_array<Tn::order>{}, k, piece.offset),
                          packed.data() + at, piece_shape, {}, piece_shape);
      at += counts[r];
    }
    comm.reduce_scatter(std::span<const typename Tn::value_type>(packed.data(), packed.size()),
                        out.elements(), counts);
    return out;
  }
}
template <MeshAxis A, Dim D, detail::handed_over Tn>
auto reduce_scatter(Tn&& t) {
  return detail::unless_one_rank<A>(std::move(t), [](const Tn& u) { return reduce_scatter<A, D>(u); });
}
template <MeshAxis A, template <class...> class D, AnyTensor Tn>
auto reduce_scatter(Tn&& t) {
  return reduce_scatter<A, D<>>(std::forward<Tn>(t));
}

namespace detail {
// all_reduce and all_reduce_max once the type is checked: [..]{U_A, ..} -> [..]{..}, each
// element combined over A by `op`.
template <MeshAxis A, AnyTensor Tn>
auto all_reduce_by(const Tn& t, reduction op) {
  using Result =
      tensor_with_t<Tn, typename Tn::dims, unreduced_without_t<typename Tn::unreduced, A>>;
  Result out(t.context(), typename Result::shape_type(t.global_extents()), for_overwrite);
  t.context().template group<A>().all_reduce(t.elements(), out.elements(), op);
  return out;
}
}  // namespace detail

// [..]{U_X} -> [..]: every rank along X ends with the sum of the partial sums.
template <MeshAxis A, AnyTensor Tn>
auto all_reduce(const Tn& t) {
  using q = detail::axis_query<Tn, A>;
  if constexpr (!q::unreduced)
    compile_error<"tpx: all_reduce<" + A::name + ">: tensor " + Tn::notation +
                  " is not unreduced over " + A::name + " (nothing to reduce)">{};
  if constexpr (q::unreduced) return detail::all_reduce_by<A>(t, reduction::sum);
}
template <MeshAxis A, detail::handed_over Tn>
auto all_reduce(Tn&& t) {
  return detail::unless_one_rank<A>(std::move(t), [](const Tn& u) { return all_reduce<A>(u); });
}

// [..]{U_X} -> [..]: every rank along X ends with the maximum of the partial maxima (NaN if any
// is NaN, except over NCCL: comm/communicator.hpp). The type change is all_reduce's.
template <MeshAxis A, AnyTensor Tn>
auto all_reduce_max(const Tn& t) {
  using q = detail::axis_query<Tn, A>;
  if constexpr (!q::unreduced)
    compile_error<"tpx: all_reduce_max<" + A::name + ">: tensor " + Tn::notation +
                  " is not unreduced over " + A::name + " (nothing to reduce)">{};
  if constexpr (q::unreduced) return detail::all_reduce_by<A>(t, reduction::max);
}
template <MeshAxis A, detail::handed_over Tn>
auto all_reduce_max(Tn&& t) {
  return detail::unless_one_rank<A>(std::move(t), [](const Tn& u) { return all_reduce_max<A>(u); });
}

// [.., F_..X, .., T_.., ..] -> [.., F_.., .., T_..X, ..]: X moves from dim F to dim T.
template <MeshAxis A, Dim From, Dim To, AnyTensor Tn>
auto all_to_all(const Tn& t) {
  using q = detail::axis_query<Tn, A>;
  constexpr int f = detail::checked_dim_position<Tn, From>();
  constexpr int k = detail::checked_dim_position<Tn, To>();
  if constexpr (f >= 0 && q::dim != f)
    compile_error<"tpx: all_to_all<" + A::name + ", " + From::name + ", " + To::name + ">: dim " +
                  From::name + " of " + Tn::notation + " is not split over " + A::name>{};
  else if constexpr (f >= 0 && !q::innermost)
    compile_error<"tpx: all_to_all<" + A::name + ", " + From::name + ", " + To::name +
                  ">: mesh axis " + A::name + " is not the innermost split of dim " + From::name +
                  " in " + Tn::notation>{};
  else if constexpr (f == k)
    compile_error<"tpx: all_to_all<" + A::name + ", " + From::name + ", " + To::name +
                  ">: source and target dim are the same">{};
  if constexpr (f >= 0 && k >= 0 && f != k && q::dim == f && q::innermost) {
    using from_dim = type_at_t<f, typename Tn::dims>;
    using to_dim = type_at_t<k, typename Tn::dims>;
    using Result = tensor_with_t<
        Tn,
        replace_dim_t<replace_dim_t<typename Tn::dims, from_dim, without_axis_t<A, from_dim>>,
                      to_dim, with_axis_appended_t<A, to_dim>>,
        typename Tn::unreduced>;
    const rank_context& ctx = t.context();
    Result out(ctx, typename Result::shape_type(t.global_extents()), for_overwrite);
    any_communicator& comm = ctx.template group<A>();
    const int parts = comm.size();
    const int me = comm.rank();
    const block parent =
        detail::block_over(ctx, t.global_extent(f), typename without_axis_t<A, from_dim>::axes{});
    const std::int64_t to_extent = t.local_extent(k);
    const std::int64_t others =
        element_count(detail::with_entry(detail::with_entry(t.local_extents(), f, 1), k, 1));
    std::vector<std::size_t> counts(static_cast<std::size_t>(parts) * parts);
    for (int src = 0; src < parts; ++src)
      for (int dst = 0; dst < parts; ++dst)
        counts[src * parts + dst] =
            static_cast<std::size_t>(split_block(parent.size, parts, src).size *
                                     split_block(to_extent, parts, dst).size * others);
    using V = typename Tn::value_type;
    auto send = Tn::space::template make_buffer_for_overwrite<V>(ctx, t.size());
    auto received = Tn::space::template make_buffer_for_overwrite<V>(ctx, out.size());
    std::size_t at = 0;
    for (int dst = 0; dst < parts; ++dst) {
      const block piece = split_block(to_extent, parts, dst);
      const auto piece_shape = detail::with_entry(t.local_extents(), k, piece.size);
      Tn::space::copy_box(ctx, t.data(), t.local_extents(),
                          detail::with_entry(index_array<Tn::order>{}, k, piece.offset),
                          send.data() + at, piece_shape, {}, piece_shape);
      at += counts[me * parts + dst];
    }
    comm.all_to_all(std::span<const V>(send.data(), send.size()),
                    std::span(received.data(), received.size()), counts);
    at = 0;
    for (int src = 0; src < parts; ++src) {
      const block piece = split_block(parent.size, parts, src);
      const auto piece_shape = detail::with_entry(out.local_extents(), f, piece.size);
      Tn::space::copy_box(
          ctx, received.data() + at, piece_shape, {}, out.data(), out.local_extents(),
          detail::with_entry(index_array<Tn::order>{}, f, piece.offset), piece_shape);
      at += counts[src * parts + me];
    }
    return out;
  }
}
template <MeshAxis A, template <class...> class From, template <class...> class To, AnyTensor Tn>
auto all_to_all(const Tn& t) {
  return all_to_all<A, From<>, To<>>(t);
}

// [.., D_.., ..] -> [.., D_..X, ..] without communication: this rank keeps its block along X.
template <MeshAxis A, Dim D, AnyTensor Tn>
auto slice(const Tn& t) {
  using q = detail::axis_query<Tn, A>;
  constexpr int k = detail::checked_dim_position<Tn, D>();
  if constexpr (q::dim >= 0 || q::unreduced)
    compile_error<"tpx: slice<" + A::name + ", " + D::name + ">: tensor " + Tn::notation +
                  " already uses mesh axis " + A::name>{};
  if constexpr (k >= 0 && q::dim < 0 && !q::unreduced) {
    using old_dim = type_at_t<k, typename Tn::dims>;
    using Result =
        tensor_with_t<Tn,
                      replace_dim_t<typename Tn::dims, old_dim, with_axis_appended_t<A, old_dim>>,
                      typename Tn::unreduced>;
    const rank_context& ctx = t.context();
    Result out(ctx, typename Result::shape_type(t.global_extents()), for_overwrite);
    index_array<Tn::order> start{};
    start[k] = out.local_offset(k) - t.local_offset(k);
    Tn::space::copy_box(ctx, t.data(), t.local_extents(), start, out.data(), out.local_extents(),
                        {}, out.local_extents());
    return out;
  }
}
template <MeshAxis A, template <class...> class D, AnyTensor Tn>
auto slice(const Tn& t) {
  return slice<A, D<>>(t);
}
// The same, A checked against rank's mesh at compile time (ops/target_axes.hpp).
template <MeshAxis A, Dim D, TypedRank R, AnyTensor Tn>
auto slice(const R& rank, const Tn& t) {
  static_assert(detail::check_axes_in_mesh<"slice<" + A::name + ", " + D::name + ">",
                                           typename R::mesh_type, type_list<A>>());
  detail::check_belongs_to(rank, t, "slice");
  return slice<A, D>(t);
}
template <MeshAxis A, template <class...> class D, TypedRank R, AnyTensor Tn>
auto slice(const R& rank, const Tn& t) {
  return slice<A, D<>>(rank, t);
}

// [.., D_..X, ..] -> [.., D_.., ..]{U_X} without communication: this rank's block, zeros
// elsewhere; the sum over X of the results is the gathered tensor.
template <MeshAxis A, Dim D, AnyTensor Tn>
auto embed(const Tn& t) {
  using q = detail::axis_query<Tn, A>;
  constexpr int k = detail::checked_dim_position<Tn, D>();
  if constexpr (k >= 0 && (q::dim != k || !q::innermost))
    compile_error<"tpx: embed<" + A::name + ", " + D::name + ">: mesh axis " + A::name +
                  " is not the innermost split of dim " + D::name + " in " + Tn::notation>{};
  if constexpr (k >= 0 && q::dim == k && q::innermost) {
    using old_dim = type_at_t<k, typename Tn::dims>;
    using Result =
        tensor_with_t<Tn, replace_dim_t<typename Tn::dims, old_dim, without_axis_t<A, old_dim>>,
                      unreduced_union_t<typename Tn::unreduced, Unreduced<A>>>;
    const rank_context& ctx = t.context();
    Result out(ctx, typename Result::shape_type(t.global_extents()));
    index_array<Tn::order> start{};
    start[k] = t.local_offset(k) - out.local_offset(k);
    Tn::space::copy_box(ctx, t.data(), t.local_extents(), {}, out.data(), out.local_extents(),
                        start, t.local_extents());
    return out;
  }
}
template <MeshAxis A, template <class...> class D, AnyTensor Tn>
auto embed(const Tn& t) {
  return embed<A, D<>>(t);
}

}  // namespace tpx

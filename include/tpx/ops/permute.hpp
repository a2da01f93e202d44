// permute<Dims...>(t): the same tensor with its dims stored in another order, a local transpose.
//
//   auto k2 = tpx::permute<B, H, S, E>(k);   // K[B_X, S, H_Y, E] -> K[B_X, H_Y, S, E]
//
// Each dim keeps its split, so every rank keeps the elements it holds and nothing is
// communicated: one read and one write of the local block (kernels/permute.hpp's functor, run by
// the space's for_each_element loop on the host and the GPU alike). The dims are named as for
// reduce_scatter, as templates (permute<B, H, S, E>) or as types (permute<B<>, H<>, S<>, E<>>),
// and must be every dim of t, each once; anything else is a compile error naming them. einsum
// (ops/einsum.hpp) copies an operand the same way when its dims are not laid out as a stack of
// matrices, and fused attention (nn/fused_attention.hpp) to put the batch dims first.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tpx/core/compile_error.hpp"
#include "tpx/core/type_list.hpp"
#include "tpx/kernels/permute.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

namespace detail {

// Copies the block src (row-major, `extents`) into dst in the order `order` (dst dim i is src
// dim order[i]); src and dst are arrays of Space and must not overlap.
template <class Space, class T, std::size_t N>
void permute_block_into(const rank_context& ctx, const T* src, const index_array<N>& extents,
                        const int* order, T* dst) {
  static_assert(N >= 1 && N <= kernels::permute_into<T>::capacity);
  const auto f = kernels::permute_into<T>::of(src, extents.data(), static_cast<int>(N), order, dst);
  const std::int64_t count = element_count(extents);
  if (count > 0) Space::for_each_element(ctx, count / f.extent[N - 1], f.extent[N - 1], f);
}

// The same into a new buffer of Space.
template <class Space, class T, std::size_t N>
typename Space::template buffer<T> permuted_block(const rank_context& ctx, const T* src,
                                                  const index_array<N>& extents, const int* order) {
  auto out = Space::template make_buffer_for_overwrite<T>(
      ctx, static_cast<std::size_t>(element_count(extents)));
  permute_block_into<Space>(ctx, src, extents, order, out.data());
  return out;
}

// Whether Order names every dim of the unsplit dim list Dims once.
template <class Dims, class... Order>
inline constexpr bool is_permutation_v = sizeof...(Order) == Dims::size &&
                                         (contains_v<unsplit_t<Order>, Dims> && ...) &&
                                         unique_t<type_list<unsplit_t<Order>...>>::size ==
                                             sizeof...(Order);

}  // namespace detail

template <Dim... Order, AnyTensor Tn>
auto permute(const Tn& t) {
  using names = typename remove_all_axes<typename Tn::dims>::type;
  if constexpr (!detail::is_permutation_v<names, Order...>) {
    compile_error<"tpx: permute of " + Tn::notation +
                  ": the dims listed must be every dim of the tensor, each once">{};
  } else {
    constexpr int order[] = {index_of_v<unsplit_t<Order>, names>...};
    using Result = tensor_with_t<
        Tn, type_list<type_at_t<index_of_v<unsplit_t<Order>, names>, typename Tn::dims>...>,
        typename Tn::unreduced>;
    index_array<Tn::order> global{};
    for (std::size_t i = 0; i < Tn::order; ++i) global[i] = t.global_extent(order[i]);
    Result out(t.context(), typename Result::shape_type(global), for_overwrite);
    detail::permute_block_into<typename Tn::space>(t.context(), t.data(), t.local_extents(), order,
                                                   out.data());
    return out;
  }
}
template <template <class...> class... Order, AnyTensor Tn>
auto permute(const Tn& t) {
  return permute<Order<>...>(t);
}

}  // namespace tpx

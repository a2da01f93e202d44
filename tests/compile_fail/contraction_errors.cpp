// Batched contractions (tpx::einsum, include/tpx/ops/einsum.hpp), the attention built on them
// (include/tpx/nn/attention.hpp, and the fused layer's nn/fused_attention.hpp; grouped-query
// attention's group dim unnamed, absent or misplaced), GELU fused into
// products (nn/gelu_product.hpp), RMSNorm's backward pass on a gradient of another layout
// (nn/rmsnorm.hpp), rotary embedding of a split head dim or of a missing position dim
// (nn/rotary.hpp), a load-balanced sequence order named over other axes than the sequence's
// (nn/sequence_order.hpp), an embedding lookup into a partial sum (nn/embedding.hpp), a loss, norm
// weight or embedding table per block of a dim x does not lead with (nn/cross_entropy.hpp,
// rmsnorm.hpp, embedding.hpp), the renaming of dims they need (ops/rename.hpp) and a sum over a
// dim the tensor lacks (ops/sum.hpp) that tpx must reject at compile time, one per case, each
// with the sentence the compiler must print. As for sharding_errors.cpp, tests/CMakeLists.txt
// reads the `// expect(CASE): text` lines below, compiles this file once per CASE with -DCASE,
// and passes only if compilation fails with a diagnostic containing the text.
//
// expect(EINSUM_BATCH_SPLIT_DIFFERS): batch dim H is split as H_Y on the left and as H on the right
// expect(EINSUM_BATCH_AXES_ORDER): batch dim B is split as B_XY on the left and as B_YX
// expect(EINSUM_DIM_MISSING): \*_E \[B, S, F\]: the right operand has no dim E
// expect(EINSUM_DIM_TWICE): dim E is named twice
// expect(EINSUM_UNREDUCED_MEETS_AXIS): left operand is unreduced over X and the right one also
// expect(EINSUM_ELEMENT_TYPES): the operands must have the same element type and memory space
// expect(EINSUM_TOO_MANY_DIMS): the result would have more dims than a tensor may
// expect(ATTENTION_SPLIT_KEYS): key sequence dim S of \[B, H_Y, S_X, E\] is split over mesh axes X; attention needs every key on every rank
// expect(FUSED_ATTENTION_SPLIT_KEYS): key sequence dim S of \[B, S_X, H_Y, E\] is split over mesh axes X; attention needs every key on every rank
// expect(FUSED_ATTENTION_ORDER_AXES): fused_causal_attention: sequence dim T of \[B, T_X, H_Y, E\] is split over mesh axes X, but load_balanced<Y> orders a sequence split over those axes
// expect(ATTENTION_SPLIT_HEAD_DIM): head dim E of \[B, H, S, E_Y\] is split over mesh axes Y
// expect(ATTENTION_GROUP_UNNAMED): q \[B, T, H, G, E\] has two dims that k \[B, S, H, E\] lacks, T and G; grouped-query attention names its group dim
// expect(ATTENTION_GROUP_NOT_IN_QUERY): query_groups<F>: F must be a dim of q \[B, T, H, G, E\] that k \[B, S, H, E\] lacks
// expect(ATTENTION_GROUP_NOT_LAST): group dim G of q \[B, T, G, H, E\] must come last among the dims of q besides T and E
// expect(FUSED_ATTENTION_GROUP_NOT_LAST): group dim G of q \[B, G, H, T, E\] must come last among the dims of q besides T and E
// expect(GELU_PRODUCT_PARTIAL_SUM): gelu_product \[B, E_Y\] \*_E \[E_Y, F\]: the product \[B, F\].U_Y. is a partial sum
// expect(GELU_BACKWARD_SPLIT_DIFFERS): gelu_product_backward: the pre-activation \[B, F\] must be whole values with the dims, splits, element type and memory space of the product \[B, E\] \*_E \[F_Y, E\] -> \[B, F_Y\]
// expect(RENAME_LVALUE): rename<T, S> of tensor \[B, T, E\]: rename takes over the elements of the tensor
// expect(RENAME_UNKNOWN_DIM): rename<S, F>: tensor \[B, T, E\] has no dim S
// expect(RENAME_TO_EXISTING): rename<T, E>: tensor \[B, T, E\] already has a dim E
// expect(RMSNORM_GRADIENT_SPLIT_DIFFERS): rmsnorm_backward: dy \[B_X, T, E\].U_Y. must have the dims of x \[B_X, T_Y, E\], split alike
// expect(ROTARY_SPLIT_HEAD_DIM): rotary: head dim E of \[B, T, H, E_Y\] is split over mesh axes Y
// expect(ROTARY_NO_POSITION_DIM): rotary: tensor \[B, T, H, E\] has no position dim S before its last
// expect(ROTARY_ORDER_WHOLE_DIM): rotary: sequence dim T of \[B, T, H, E\] is whole on every rank, but load_balanced<X> orders a sequence split over those axes
// expect(EMBEDDING_ADD_PARTIAL): embedding_add: x \[B_X, T, E\].U_Y. is a partial sum
// expect(CROSS_ENTROPY_PER_NOT_LEADING): cross_entropy_per<S>: logits \[B_X, S, F_Y\] do not lead with dim S
// expect(RMSNORM_WEIGHT_BLOCK_DIM): rmsnorm: a weight \[S_X, E\] per block must have the first and last dims of x \[S, B_X, E\], split alike
// expect(EMBEDDING_TABLE_BLOCK_DIM): embedding_add: a table \[B, F, E\] per block must lead with the first dim of x \[S, B_X, E\], split alike
// expect(SUM_UNKNOWN_DIM): sum<S>: tensor \[B_X, E\] has no dim S
// expect(EMBEDDING_GRADIENT_BLOCK_DIM): embedding_gradient<S, F>: dx \[B_X, S, E\] does not lead with dim S
#include <tpx/nn/attention.hpp>
#include <tpx/nn/cross_entropy.hpp>
#include <tpx/nn/embedding.hpp>
#include <tpx/nn/fused_attention.hpp>
#include <tpx/nn/gelu_product.hpp>
#include <tpx/nn/rmsnorm.hpp>
#include <tpx/nn/rotary.hpp>
#include <tpx/tpx.hpp>

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, G, H, T, S, E, F, J, P1, P2, P3, P4, P5, Q1, Q2, Q3, Q4);

using tpx::Tensor;
using tpx::Unreduced;

template <class Tn>
const Tn& some() {
  static const Tn* none = nullptr;
  return *none;
}

void body() {
#if defined(EINSUM_BATCH_SPLIT_DIFFERS)
  auto t = tpx::einsum<E>(some<Tensor<float, B<X>, H<Y>, T<>, E<>>>(),
                          some<Tensor<float, B<X>, H<>, S<>, E<>>>());
#elif defined(EINSUM_BATCH_AXES_ORDER)
  auto t = tpx::einsum<E>(some<Tensor<float, B<X, Y>, T<>, E<>>>(),
                          some<Tensor<float, B<Y, X>, S<>, E<>>>());
#elif defined(EINSUM_DIM_MISSING)
  auto t =
      tpx::einsum<E>(some<Tensor<float, B<>, T<>, E<>>>(), some<Tensor<float, B<>, S<>, F<>>>());
#elif defined(EINSUM_DIM_TWICE)
  auto t =
      tpx::einsum<E, E>(some<Tensor<float, B<>, T<>, E<>>>(), some<Tensor<float, B<>, S<>, E<>>>());
#elif defined(EINSUM_UNREDUCED_MEETS_AXIS)
  auto t = tpx::einsum<E>(some<Tensor<float, B<>, T<>, E<>, Unreduced<X>>>(),
                          some<Tensor<float, B<>, S<X>, E<>>>());
#elif defined(EINSUM_ELEMENT_TYPES)
  auto t = tpx::einsum<E>(some<Tensor<float, B<>, T<>, E<>>>(),
                          some<Tensor<tpx::bf16, B<>, S<>, E<>>>());
#elif defined(EINSUM_TOO_MANY_DIMS)
  auto t = tpx::contract<J>(some<Tensor<float, P1<>, P2<>, P3<>, P4<>, P5<>, J<>>>(),
                            some<Tensor<float, J<>, Q1<>, Q2<>, Q3<>, Q4<>>>());
#elif defined(ATTENTION_SPLIT_KEYS)
  // Context parallelism's keys left split: a block of queries needs every key before it.
  using Q = Tensor<float, B<>, H<Y>, T<X>, E<>>;
  using K = Tensor<float, B<>, H<Y>, S<X>, E<>>;
  auto t = tpx::nn::causal_attention_forward(some<Q>(), some<K>(), some<K>());
#elif defined(FUSED_ATTENTION_SPLIT_KEYS)
  // The fused kernels take a block of queries too, against every key: k and v left split.
  using K = Tensor<float, B<>, S<X>, H<Y>, E<>>;
  auto t = tpx::nn::fused_causal_attention_forward(some<Tensor<float, B<>, T<X>, H<Y>, E<>>>(),
                                                   some<K>(), some<K>());
#elif defined(FUSED_ATTENTION_ORDER_AXES)
  // The balanced order named over another axis than the one that splits the queries.
  using K = Tensor<float, B<>, S<>, H<Y>, E<>>;
  auto t = tpx::nn::fused_causal_attention_forward<tpx::nn::load_balanced<Y>>(
      some<Tensor<float, B<>, T<X>, H<Y>, E<>>>(), some<K>(), some<K>());
#elif defined(ATTENTION_SPLIT_HEAD_DIM)
  using K = Tensor<float, B<>, H<>, S<>, E<Y>>;
  auto t = tpx::nn::causal_attention_forward(some<Tensor<float, B<>, H<>, T<>, E<>>>(), some<K>(),
                                             some<K>());
#elif defined(ATTENTION_GROUP_UNNAMED)
  // Grouped-query attention without naming the group dim: T or G could be the sequence.
  using K = Tensor<float, B<>, S<>, H<>, E<>>;
  auto t = tpx::nn::causal_attention_forward(some<Tensor<float, B<>, T<>, H<>, G<>, E<>>>(),
                                             some<K>(), some<K>());
#elif defined(ATTENTION_GROUP_NOT_IN_QUERY)
  using K = Tensor<float, B<>, S<>, H<>, E<>>;
  auto t = tpx::nn::causal_attention_forward<tpx::nn::query_groups<F>>(
      some<Tensor<float, B<>, T<>, H<>, G<>, E<>>>(), some<K>(), some<K>());
#elif defined(ATTENTION_GROUP_NOT_LAST)
  // A key head's queries must lie together: G after the key heads H, not before.
  using K = Tensor<float, B<>, S<>, H<>, E<>>;
  auto t = tpx::nn::causal_attention_forward<tpx::nn::query_groups<G>>(
      some<Tensor<float, B<>, T<>, G<>, H<>, E<>>>(), some<K>(), some<K>());
#elif defined(FUSED_ATTENTION_GROUP_NOT_LAST)
  using K = Tensor<float, B<>, H<>, S<>, E<>>;
  auto t = tpx::nn::fused_causal_attention_forward<tpx::nn::query_groups<G>>(
      some<Tensor<float, B<>, G<>, H<>, T<>, E<>>>(), some<K>(), some<K>());
#elif defined(GELU_PRODUCT_PARTIAL_SUM)
  auto t = tpx::nn::gelu_product<E>(some<Tensor<float, B<>, E<Y>>>(), some<Tensor<float, E<Y>, F<>>>());
#elif defined(GELU_BACKWARD_SPLIT_DIFFERS)
  auto t = tpx::nn::gelu_product_backward<E>(some<Tensor<float, B<>, F<>>>(),
                                             some<Tensor<float, B<>, E<>>>(),
                                             some<Tensor<float, F<Y>, E<>>>());
#elif defined(RENAME_LVALUE)
  Tensor<float, B<>, T<>, E<>> k = some<Tensor<float, B<>, T<>, E<>>>();
  auto t = tpx::rename<T, S>(k);
#elif defined(RENAME_UNKNOWN_DIM)
  auto t = tpx::rename<S, F>(Tensor<float, B<>, T<>, E<>>(some<Tensor<float, B<>, T<>, E<>>>()));
#elif defined(RENAME_TO_EXISTING)
  auto t = tpx::rename<T, E>(Tensor<float, B<>, T<>, E<>>(some<Tensor<float, B<>, T<>, E<>>>()));
#elif defined(RMSNORM_GRADIENT_SPLIT_DIFFERS)
  // The gradient of plain tensor parallelism's stream, [B, T, E]{U_Y}, handed to the backward
  // pass of a norm over sequence parallelism's stream [B, T_Y, E].
  auto g = tpx::nn::rmsnorm_backward(some<Tensor<float, B<X>, T<Y>, E<>>>(), some<Tensor<float, E<>>>(),
                                     some<Tensor<float, B<X>, T<Y>>>(),
                                     some<Tensor<float, B<X>, T<>, E<>, Unreduced<Y>>>());
#elif defined(ROTARY_SPLIT_HEAD_DIM)
  // Heads' elements split over Y, as a wrong weight layout would leave them: a pair (i, i + E/2)
  // spans two ranks.
  auto t = tpx::nn::rotary_forward<T>(some<Tensor<float, B<>, T<>, H<>, E<Y>>>());
#elif defined(ROTARY_NO_POSITION_DIM)
  // Keys named S rotated as if their positions were called S, on queries that have T.
  auto t = tpx::nn::rotary_forward<S>(some<Tensor<float, B<>, T<>, H<>, E<>>>());
#elif defined(ROTARY_ORDER_WHOLE_DIM)
  // A whole sequence rotated as a rank's balanced block.
  auto t = tpx::nn::rotary_forward<T, tpx::nn::load_balanced<X>>(
      some<Tensor<float, B<>, T<>, H<>, E<>>>());
#elif defined(EMBEDDING_ADD_PARTIAL)
  // A lookup added to a gradient-like partial sum instead of to the stream.
  auto x = some<Tensor<float, B<X>, T<>, E<>, Unreduced<Y>>>();
  tpx::nn::embedding_add(x, some<Tensor<float, F<>, E<>>>(),
                         some<Tensor<std::int32_t, B<X>, T<>, J<>>>(), 0);
#elif defined(CROSS_ENTROPY_PER_NOT_LEADING)
  // A pipeline's loss per stage block, with the stage dim S behind the rows.
  auto ce = tpx::nn::cross_entropy_per<S>(some<Tensor<float, B<X>, S<>, F<Y>>>(),
                                          some<Tensor<std::int32_t, B<X>, S<>, J<>>>(), 0);
#elif defined(RMSNORM_WEIGHT_BLOCK_DIM)
  // A stage's norm weights stacked over S, split otherwise than x's stage dim.
  auto n = tpx::nn::rmsnorm_forward(some<Tensor<float, S<>, B<X>, E<>>>(), some<Tensor<float, S<X>, E<>>>());
#elif defined(EMBEDDING_TABLE_BLOCK_DIM)
  // Tables stacked over the rows' second dim, not their first.
  auto x = some<Tensor<float, S<>, B<X>, E<>>>();
  tpx::nn::embedding_add(x, some<Tensor<float, B<>, F<>, E<>>>(),
                         some<Tensor<std::int32_t, S<>, B<X>, J<>>>(), 0);
#elif defined(EMBEDDING_GRADIENT_BLOCK_DIM)
  auto g = tpx::nn::embedding_gradient<S, F>(some<Tensor<float, B<X>, S<>, E<>>>(),
                                             some<Tensor<std::int32_t, B<X>, S<>, J<>>>(), 0, 4);
#elif defined(SUM_UNKNOWN_DIM)
  auto s = tpx::sum<S>(some<Tensor<float, B<X>, E<>>>());
#endif
}

int main() {}

// Static tests of the sharding algebra: notation, validity, the collectives each matmul and
// reshard plans (the notes' four cases and the FSDP/TP steps), the types collectives produce,
// and the adjoint table. Compiling this file is the test; nothing runs.
#include <tpx/tpx.hpp>

#include <type_traits>
#include <utility>

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, D, F, I, J, K);

using tpx::AllGather;
using tpx::AllReduce;
using tpx::AllToAll;
using tpx::Embed;
using tpx::ReduceScatter;
using tpx::Slice;
using tpx::Tensor;
using tpx::type_list;
using tpx::Unreduced;
using std::is_same_v;

constexpr bool same(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}

// Notation, as the notes write it.
static_assert(same(Tensor<float, B<X>, D<Y>>::notation.c_str(), "[B_X, D_Y]"));
static_assert(same(Tensor<float, I<>, K<X, Y>>::notation.c_str(), "[I, K_XY]"));
static_assert(same(Tensor<float, I<>, K<>, Unreduced<X>>::notation.c_str(), "[I, K]{U_X}"));

// Validity.
static_assert(tpx::is_valid_sharding_v<B<X>, D<Y>>);
static_assert(tpx::is_valid_sharding_v<B<X, Y>, D<>, Unreduced<>>);
static_assert(!tpx::is_valid_sharding_v<B<X>, D<X>>);
static_assert(!tpx::is_valid_sharding_v<B<>, D<>, Unreduced<X, X>>);
static_assert(!tpx::is_valid_sharding_v<B<Y>, D<>, Unreduced<Y>>);

template <class L, class R>
using plan = tpx::matmul_plan_t<L, R>;

// Case 1: no contracting dim sharded: local.
using case1 = plan<Tensor<float, I<X>, J<>>, Tensor<float, J<>, K<Y>>>;
static_assert(is_same_v<case1::lhs_steps, type_list<>> && is_same_v<case1::rhs_steps, type_list<>>);
static_assert(is_same_v<case1::result, Tensor<float, I<X>, K<Y>>>);
static_assert(same(case1::description.c_str(), "GEMM; -> [I_X, K_Y]"));

// Case 2: one side's contracting dim sharded: AllGather that side.
using case2 = plan<Tensor<float, I<>, J<X>>, Tensor<float, J<>, K<>>>;
static_assert(is_same_v<case2::lhs_steps, type_list<AllGather<X, J<>>>>);
static_assert(is_same_v<case2::result, Tensor<float, I<>, K<>>>);
static_assert(same(case2::description.c_str(), "AllGather<X>(lhs, J); GEMM; -> [I, K]"));

// Case 3: both sharded the same way: local, result unreduced.
using case3 = plan<Tensor<float, I<>, J<X>>, Tensor<float, J<X>, K<>>>;
static_assert(is_same_v<case3::lhs_steps, type_list<>> && is_same_v<case3::rhs_steps, type_list<>>);
static_assert(is_same_v<case3::result, Tensor<float, I<>, K<>, Unreduced<X>>>);
static_assert(same(case3::description.c_str(), "GEMM; -> [I, K]{U_X}"));

// Case 4: free dims on the same axis: gather one side (the right one by default).
using case4 = plan<Tensor<float, I<X>, J<>>, Tensor<float, J<>, K<X>>>;
static_assert(is_same_v<case4::rhs_steps, type_list<AllGather<X, K<>>>>);
static_assert(is_same_v<case4::result, Tensor<float, I<X>, K<>>>);
// ... or the left one, when the declared result keeps K split.
using case4_lhs = tpx::matmul_traits<Tensor<float, I<X>, J<>>, Tensor<float, J<>, K<X>>, J<>,
                                     Tensor<float, I<>, K<X>>>;
static_assert(is_same_v<case4_lhs::lhs_steps, type_list<AllGather<X, I<>>>>);
static_assert(is_same_v<case4_lhs::result, Tensor<float, I<>, K<X>>>);

// Contracting over a dim that is first in memory: the backward products need no transpose.
using dw = plan<Tensor<float, B<X>, D<>>, Tensor<float, B<X>, F<>>>;  // In^T *_B dTmp
static_assert(is_same_v<dw::result, Tensor<float, D<>, F<>, Unreduced<X>>>);

// Different splits of J: keep the common outer split, gather the rest.
using mixed = plan<Tensor<float, I<>, J<X, Y>>, Tensor<float, J<X>, K<>>>;
static_assert(is_same_v<mixed::lhs_steps, type_list<AllGather<Y, J<>>>>);
static_assert(is_same_v<mixed::result, Tensor<float, I<>, K<>, Unreduced<X>>>);

// Partial sums meet operands that do not use their axis.
static_assert(tpx::can_contract_v<Tensor<float, I<>, J<>, Unreduced<X>>, Tensor<float, J<>, K<Y>>, J<>>);
static_assert(!tpx::can_contract_v<Tensor<float, I<>, J<>, Unreduced<X>>, Tensor<float, J<>, K<X>>, J<>>);
static_assert(!tpx::can_contract_v<Tensor<float, I<>, J<>, Unreduced<X>>, Tensor<float, J<>, K<>, Unreduced<X>>, J<>>);

// reshard plans.
template <class From, class To>
using rs = tpx::reshard_traits<From, To>;
using fsdp_gather = rs<Tensor<float, D<X>, F<Y>>, Tensor<float, D<>, F<Y>>>;
static_assert(is_same_v<fsdp_gather::steps, type_list<AllGather<X, D<>>>>);
static_assert(same(fsdp_gather::description.c_str(), "AllGather<X>(D); -> [D, F_Y]"));
using move_axis = rs<Tensor<float, B<X>, D<>>, Tensor<float, B<>, D<X>>>;
static_assert(is_same_v<move_axis::steps, type_list<AllToAll<X, B<>, D<>>>>);
using scatter_sum = rs<Tensor<float, F<Y>, D<>, Unreduced<X>>, Tensor<float, F<Y>, D<X>>>;
static_assert(is_same_v<scatter_sum::steps, type_list<ReduceScatter<X, D<>>>>);
using sum = rs<Tensor<float, I<>, K<>, Unreduced<X>>, Tensor<float, I<>, K<>>>;
static_assert(is_same_v<sum::steps, type_list<AllReduce<X>>>);
using local_slice = rs<Tensor<float, I<>, K<>>, Tensor<float, I<Y>, K<X>>>;
static_assert(is_same_v<local_slice::steps, type_list<Slice<Y, I<>>, Slice<X, K<>>>>);
using swap_order = rs<Tensor<float, B<X, Y>, D<>>, Tensor<float, B<Y, X>, D<>>>;
static_assert(is_same_v<swap_order::steps,
                        type_list<AllGather<Y, B<>>, AllGather<X, B<>>, Slice<Y, B<>>, Slice<X, B<>>>>);

// The types collectives produce (decltype only; nothing runs).
template <class T>
T& any();
static_assert(is_same_v<decltype(tpx::all_gather<Y>(any<Tensor<float, B<X>, D<Y>>>())),
                        Tensor<float, B<X>, D<>>>);
static_assert(is_same_v<decltype(tpx::reduce_scatter<Y, D>(any<Tensor<float, B<X>, D<>, Unreduced<Y>>>())),
                        Tensor<float, B<X>, D<Y>>>);
static_assert(is_same_v<decltype(tpx::all_reduce<Y>(any<Tensor<float, B<X>, D<>, Unreduced<Y>>>())),
                        Tensor<float, B<X>, D<>>>);
static_assert(is_same_v<decltype(tpx::all_to_all<X, B, D>(any<Tensor<float, B<X>, D<Y>>>())),
                        Tensor<float, B<>, D<Y, X>>>);
static_assert(is_same_v<decltype(tpx::slice<Y, B>(any<Tensor<float, B<X>, D<>>>())),
                        Tensor<float, B<X, Y>, D<>>>);
static_assert(is_same_v<decltype(tpx::embed<Y, B>(any<Tensor<float, B<X, Y>, D<>>>())),
                        Tensor<float, B<X>, D<>, Unreduced<Y>>>);

// One rule for every op that takes a target: a whole tensor type, or its dims and Unreduced.
template <class... Spec>
using from_spec = decltype(tpx::reshard<Spec...>(any<Tensor<float, I<X>, J<Y>>>()));
static_assert(is_same_v<from_spec<I<>, J<Y>>, from_spec<Tensor<float, I<>, J<Y>>>>);
static_assert(is_same_v<from_spec<I<>, J<Y>>, Tensor<float, I<>, J<Y>>>);
using mm_l = Tensor<float, I<X>, J<>>;
using mm_r = Tensor<float, J<>, K<X>>;
static_assert(is_same_v<decltype(tpx::matmul<I<X>, K<>>(any<mm_l>(), any<mm_r>())),
                        decltype(tpx::matmul<Tensor<float, I<X>, K<>>>(any<mm_l>(), any<mm_r>()))>);
static_assert(is_same_v<decltype(tpx::matmul<I<>, K<X>>(any<mm_l>(), any<mm_r>())),
                        decltype(tpx::matmul<Tensor<float, I<>, K<X>>>(any<mm_l>(), any<mm_r>()))>);
static_assert(is_same_v<decltype(tpx::matmul<I<>, K<X>>(any<mm_l>(), any<mm_r>())),
                        Tensor<float, I<>, K<X>>>);
using mm_partial_l = Tensor<float, I<>, J<X>>;
using mm_partial_r = Tensor<float, J<X>, K<>>;
static_assert(is_same_v<
              decltype(tpx::matmul<I<>, K<>, Unreduced<X>>(any<mm_partial_l>(), any<mm_partial_r>())),
              decltype(tpx::matmul<Tensor<float, I<>, K<>, Unreduced<X>>>(any<mm_partial_l>(),
                                                                          any<mm_partial_r>()))>);
static_assert(is_same_v<decltype(tpx::matmul<I<>, K<Y>>(any<mm_partial_l>(), any<mm_partial_r>())),
                        Tensor<float, I<>, K<Y>>>);

// A partial sum over {X, Y} is one type, whatever order it is written or produced in, and
// reshard returns exactly the type asked for.
static_assert(is_same_v<Tensor<float, I<>, K<>, Unreduced<X, Y>>,
                        Tensor<float, I<>, K<>, Unreduced<Y, X>>>);
static_assert(is_same_v<Tensor<float, I<>, K<>, Unreduced<Y, X>>::unreduced, Unreduced<X, Y>>);
using partial_y = Tensor<float, I<>, J<X>, Unreduced<Y>>;
using partial_xy = decltype(tpx::matmul(any<partial_y>(), any<Tensor<float, J<X>, K<>>>()));
static_assert(is_same_v<partial_xy, Tensor<float, I<>, K<>, Unreduced<Y, X>>>);
static_assert(same(partial_xy::notation.c_str(), "[I, K]{U_XY}"));
static_assert(is_same_v<decltype(tpx::reshard<I<>, K<>, Unreduced<Y, X>>(any<partial_xy>())),
                        Tensor<float, I<>, K<>, Unreduced<Y, X>>>);
static_assert(is_same_v<decltype(tpx::reshard<I<>, K<Y>, Unreduced<X>>(any<partial_xy>())),
                        Tensor<float, I<>, K<Y>, Unreduced<X>>>);
static_assert(is_same_v<decltype(tpx::embed<X, K>(any<Tensor<float, I<>, K<X>, Unreduced<Y>>>())),
                        Tensor<float, I<>, K<>, Unreduced<Y, X>>>);

// The adjoint table, and that adjoints are involutions.
static_assert(is_same_v<tpx::adjoint_t<AllGather<X, D<>>>, ReduceScatter<X, D<>>>);
static_assert(is_same_v<tpx::adjoint_t<ReduceScatter<X, D<>>>, AllGather<X, D<>>>);
static_assert(is_same_v<tpx::adjoint_t<AllReduce<X>>, AllReduce<X>>);
static_assert(is_same_v<tpx::adjoint_t<AllToAll<X, B<>, D<>>>, AllToAll<X, D<>, B<>>>);
static_assert(is_same_v<tpx::adjoint_t<Slice<X, D<>>>, Embed<X, D<>>>);
template <class S>
constexpr bool involution = is_same_v<tpx::adjoint_t<tpx::adjoint_t<S>>, S>;
static_assert(involution<AllGather<X, D<>>> && involution<ReduceScatter<Y, B<>>> &&
              involution<AllReduce<X>> && involution<AllToAll<X, B<>, D<>>> &&
              involution<Slice<Y, F<>>> && involution<Embed<Y, F<>>>);

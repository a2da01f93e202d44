// The collectives as types: the vocabulary of plans, and the adjoint of each.
//
// A plan (what reshard or matmul will do) is a type_list of these steps, so a test can
// static_assert it and a trainer can derive its backward pass from its forward one. Dims in
// steps are written unsplit (D<>), the identity of the dim.
//
// The convention (the notes', and meta-pytorch/spmd_types' duality R <-> P, V <-> V): the
// gradient of a tensor replicated over A is unreduced over A (each rank holds its own
// contribution), the gradient of an unreduced tensor is replicated, and the gradient of a
// sharded tensor is sharded the same way. The adjoint of a step maps the gradient of its output
// to the gradient of its input:
//
//   step                 forward effect on the type          adjoint
//   AllGather<A, D>      D_..A       -> D_..                 ReduceScatter<A, D>
//   ReduceScatter<A, D>  D_.. {U_A}  -> D_..A                AllGather<A, D>
//   AllReduce<A>         {U_A}       -> replicated over A    AllReduce<A>
//   AllToAll<A, F, T>    F_..A, T_.. -> F_.., T_..A          AllToAll<A, T, F>
//   Slice<A, D>          D_..        -> D_..A   (local)      Embed<A, D>
//   Embed<A, D>          D_..A       -> D_.. {U_A} (local)   Slice<A, D>
//
// Slice takes this rank's block of a replicated dim; Embed writes this rank's block into zeros
// of the whole dim, giving a partial sum whose total is the gathered tensor.
#pragma once

#include "tpx/sharding/dim.hpp"
#include "tpx/sharding/mesh_axis.hpp"

namespace tpx {

template <MeshAxis A, Dim D>
struct AllGather {};
template <MeshAxis A, Dim D>
struct ReduceScatter {};
template <MeshAxis A>
struct AllReduce {};
template <MeshAxis A, Dim From, Dim To>
struct AllToAll {};
template <MeshAxis A, Dim D>
struct Slice {};
template <MeshAxis A, Dim D>
struct Embed {};
// Marks the local GEMM in a matmul plan.
struct Gemm {};

template <class Step>
struct adjoint;
template <class A, class D>
struct adjoint<AllGather<A, D>> {
  using type = ReduceScatter<A, D>;
};
template <class A, class D>
struct adjoint<ReduceScatter<A, D>> {
  using type = AllGather<A, D>;
};
template <class A>
struct adjoint<AllReduce<A>> {
  using type = AllReduce<A>;
};
template <class A, class F, class T>
struct adjoint<AllToAll<A, F, T>> {
  using type = AllToAll<A, T, F>;
};
template <class A, class D>
struct adjoint<Slice<A, D>> {
  using type = Embed<A, D>;
};
template <class A, class D>
struct adjoint<Embed<A, D>> {
  using type = Slice<A, D>;
};
template <class Step>
using adjoint_t = typename adjoint<Step>::type;

}  // namespace tpx

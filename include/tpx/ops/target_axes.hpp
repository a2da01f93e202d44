// Checks that the mesh axes an operation moves a tensor onto are axes of the rank's mesh.
//
// reshard<Target>, matmul<Target> and slice<A, D> may name a mesh axis that none of their
// operands uses yet: reshard<I<Z>, J<>>(a) on Mesh<X, Y> asks for an axis the mesh lacks. A
// tensor's type lists the axes it is split over, not its mesh (only the rank's type,
// Rank<Mesh<X, Y>>, names the mesh), so the check is made where the mesh is known:
//   - the rank-first forms, reshard<Target>(rank, t), matmul<Target>(rank, a, b) and
//     slice<A, D>(rank, t), check at compile time, with a sentence naming the operation, the
//     target, the axis and the mesh's axes;
//   - the tensor-only forms, for code that has no rank at hand (a layer that takes tensors),
//     check at run time, before any communication: every rank throws the same error at the same
//     call.
// The rank-first forms also check that the tensors belong to that rank: a tensor made by another
// rank's thread is a bug that would otherwise read another rank's communicators.
#pragma once

#include <stdexcept>
#include <string>

#include "tpx/core/compile_error.hpp"
#include "tpx/core/fixed_string.hpp"
#include "tpx/core/type_list.hpp"
#include "tpx/spmd/rank.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::detail {

// Rejects at compile time an axis of the type_list Axes that Mesh lacks: "tpx: reshard to
// [I_Z, J]: mesh axis Z is not an axis of the mesh (X, Y)", where What is "reshard to [I_Z, J]".
template <fixed_string What, class Mesh, class Axes>
constexpr bool check_axes_in_mesh() {
  []<class... As>(type_list<As...>) {
    ([]<class A>(A*) {
      if constexpr (index_of_v<A, typename Mesh::axes> < 0)
        compile_error<"tpx: " + What + ": mesh axis " + A::name +
                      " is not an axis of the mesh (" + axis_list<typename Mesh::axes>() +
                      ")">{};
    }(static_cast<As*>(nullptr)), ...);
  }(Axes{});
  return true;
}

// The same at run time, for the tensor-only forms: throws std::invalid_argument naming the
// operation, the target, the axis, the mesh and the rank.
template <AnyTensor To>
void check_target_axes(const rank_context& ctx, const char* op) {
  [&]<class... Axes>(type_list<Axes...>) {
    [[maybe_unused]] auto check = [&]<class A>(A*) {
      if (!ctx.has_axis<A>())
        throw std::invalid_argument("tpx: " + std::string(op) + " to " +
                                    std::string(To::notation.c_str()) + ": mesh axis " +
                                    std::string(A::name.c_str()) +
                                    " is not an axis of the mesh (" + ctx.mesh_string() +
                                    ") of rank " + std::to_string(ctx.world_rank()));
    };
    (check(static_cast<Axes*>(nullptr)), ...);
  }(typename To::traits::axes{});
}

// Throws std::invalid_argument unless tensor t was made by `rank` (or from tensors that were).
template <AnyTensor Tn>
void check_belongs_to(const rank_context& rank, const Tn& t, const char* op) {
  if (&t.context() != &rank)
    throw std::invalid_argument("tpx: " + std::string(op) + ": tensor " +
                                std::string(Tn::notation.c_str()) + " belongs to rank " +
                                std::to_string(t.context().world_rank()) +
                                ", not to the rank passed, " +
                                std::to_string(rank.world_rank()));
}

}  // namespace tpx::detail

// Rank<Mesh<X, Y>>: the handle an SPMD function receives: the rank's place on a mesh whose axes
// are known at compile time.
//
// It is a rank_context (what tensors keep) plus the mesh type, so tensor factories called with
// it, and the rank-first forms of the operations that take a target (reshard<Target>(rank, t),
// ops/target_axes.hpp), reject at compile time a sharding over an axis the mesh lacks.
#pragma once

#include <concepts>
#include <utility>
#include <vector>

#include "tpx/sharding/mesh.hpp"
#include "tpx/spmd/rank_context.hpp"

namespace tpx {

template <class MeshT>
class Rank : public rank_context {
 public:
  using mesh_type = MeshT;

  Rank(const MeshT& mesh, int world_rank, std::vector<axis_place> axes,
       std::vector<any_communicator*> groups)
      : rank_context(world_rank, mesh.rank_count(), std::move(axes), std::move(groups)),
        mesh_(mesh) {}

  const MeshT& mesh() const { return mesh_; }
  template <MeshAxis A>
  int coord() const {
    return axes()[MeshT::template index_of<A>()].coord;
  }
  template <MeshAxis A>
  int size() const {
    return mesh_.template size<A>();
  }

 private:
  MeshT mesh_;
};

// A rank whose mesh is a type: Rank<Mesh<...>> and the backends' ranks derived from it.
template <class R>
concept TypedRank = std::derived_from<R, rank_context> && requires { typename R::mesh_type; };

}  // namespace tpx

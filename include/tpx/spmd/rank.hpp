// Rank<Mesh<X, Y>>: the handle an SPMD function receives: the rank's place on a mesh whose axes
// are known at compile time.
//
// It is a rank_context (what tensors keep) plus the mesh type, so tensor factories called with
// it reject, at compile time, a sharding over an axis the mesh lacks.
#pragma once

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

}  // namespace tpx

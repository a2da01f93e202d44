// Mesh axes: the named directions of the device mesh (the notes' X, Y, Z).
//
// An axis is an empty type with a name; `TPX_MESH_AXES(X, Y)` declares `struct X` and
// `struct Y`. Sizes are not part of the type: `tpx::Mesh<X, Y> mesh{2, 4}` gives them at run
// time, so one binary runs on any mesh shape.
#pragma once

#include <concepts>

#include "tpx/core/fixed_string.hpp"
#include "tpx/core/for_each_macro.hpp"

namespace tpx {

struct mesh_axis_tag {};

template <class T>
concept MeshAxis = std::derived_from<T, mesh_axis_tag>;

}  // namespace tpx

#define TPX_DETAIL_MESH_AXIS(Name)                      \
  struct Name : ::tpx::mesh_axis_tag {                  \
    static constexpr ::tpx::fixed_string name = #Name;  \
  };

// TPX_MESH_AXES(X, Y): declares the mesh axis types X and Y in the current namespace.
#define TPX_MESH_AXES(...) TPX_DETAIL_FOR_EACH(TPX_DETAIL_MESH_AXIS, __VA_ARGS__)

// Mesh<X, Y>: the device mesh, its axes as types and their sizes as run-time values.
//
// `tpx::Mesh<X, Y> mesh{2, 4}` is the notes' Mesh(devices=..., axis_names=('X', 'Y')) with 8
// ranks. Ranks are numbered row-major over the axes in the order listed (X major), so rank
// r has coordinates (r / 4, r % 4). Asking a mesh about an axis it lacks is a compile error that
// names the axis.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "tpx/core/compile_error.hpp"
#include "tpx/core/type_list.hpp"
#include "tpx/sharding/mesh_axis.hpp"

namespace tpx {

template <MeshAxis... Axes>
class Mesh {
 public:
  using axes = type_list<Axes...>;
  static constexpr int axis_count = sizeof...(Axes);

  template <std::convertible_to<int>... Sizes>
    requires(sizeof...(Sizes) == sizeof...(Axes))
  constexpr Mesh(Sizes... sizes) : sizes_{static_cast<int>(sizes)...} {  // NOLINT: {2, 2}
    for (int i = 0; i < axis_count; ++i)
      if (sizes_[i] < 1)
        throw std::invalid_argument("tpx: mesh axis " + std::string(names_[i]) + " has size " +
                                    std::to_string(sizes_[i]) + "; sizes must be >= 1");
  }

  // Position of axis A among the mesh's axes; a compile error if the mesh lacks A.
  template <MeshAxis A>
  static constexpr int index_of() {
    constexpr int i = index_of_v<A, axes>;
    if constexpr (i < 0)
      compile_error<"tpx: mesh axis " + A::name + " is not an axis of this mesh">{};
    return i;
  }

  template <MeshAxis A>
  constexpr int size() const {
    return sizes_[index_of<A>()];
  }
  constexpr int size(int axis_index) const { return sizes_[axis_index]; }
  constexpr int rank_count() const {
    int n = 1;
    for (int s : sizes_) n *= s;
    return n;
  }
  // Coordinate of world rank r along the axis at axis_index.
  constexpr int coord(int r, int axis_index) const {
    for (int i = axis_count - 1; i > axis_index; --i) r /= sizes_[i];
    return r % sizes_[axis_index];
  }
  static constexpr const char* name(int axis_index) { return names_[axis_index]; }

  // "X=2, Y=4"
  std::string to_string() const {
    std::string text;
    for (int i = 0; i < axis_count; ++i)
      text += (i ? ", " : "") + std::string(names_[i]) + "=" + std::to_string(sizes_[i]);
    return text;
  }

 private:
  static constexpr const char* names_[axis_count + 1] = {Axes::name.c_str()..., ""};
  std::array<int, axis_count> sizes_;
};

}  // namespace tpx

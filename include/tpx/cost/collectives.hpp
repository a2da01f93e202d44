// The time of the collectives a plan runs, from the plan's types alone.
//
// A plan is a type_list of steps (sharding/steps.hpp): AllGather<X, D<>>, ReduceScatter<...>,
// AllReduce<X>, AllToAll<...>, Slice and Embed. Each collective is priced the way nccl-tests
// measures it (shared/research/performance.md 2): over S bytes and the n ranks of its axis it
// moves factor * S bytes per rank over that axis's link, so it takes factor * S / W, with
//   AllGather      S = the gathered (output) block    factor (n-1)/n
//   ReduceScatter  S = the input block                 factor (n-1)/n
//   AllReduce      S = the block                       factor 2(n-1)/n
//   AllToAll       S = the block                       factor (n-1)/n
// and Slice and Embed free. A collective over a dim that is not the operand's first is done
// through a packed copy (ops/collectives.hpp packs the blocks with copy_box before, or unpacks
// them after): that costs one more read and write of the block at memory bandwidth, which is
// negligible next to NVLink on a GPU and is not on a host, where "links" are memory too.
// Latency is left out: the model is for the sizes where bandwidth rules (the benches check it
// there). A cluster is a mesh, a hardware profile and, per mesh axis,
// how many physical links carry it (the notes' n_axes: FSDP over three ICI axes of a TPU v5p
// has three times the bandwidth). Everything is constexpr.
#pragma once

#include <array>

#include "tpx/core/type_list.hpp"
#include "tpx/cost/hardware.hpp"
#include "tpx/sharding/mesh.hpp"
#include "tpx/sharding/steps.hpp"
#include "tpx/sharding/transforms.hpp"

namespace tpx::cost {

template <class MeshT>
struct cluster {
  MeshT mesh;
  hardware_profile hardware;
  std::array<double, MeshT::axis_count> links{};  // physical links per mesh axis; 0 means 1
  // Whether packing the blocks of an inner dim costs memory time; the notes' formulas leave it
  // out, so their rules of thumb are reproduced with false.
  bool price_packing = true;

  template <MeshAxis A>
  constexpr int size() const {
    return mesh.template size<A>();
  }
  // Bytes/s one device moves over axis A in one direction.
  template <MeshAxis A>
  constexpr double bandwidth() const {
    const double l = links[MeshT::template index_of<A>()];
    return hardware.link_bw * (l > 0 ? l : 1);
  }
};

struct comm_estimate {
  double bus_bytes = 0;     // factor * S, summed over the collectives
  double packed_bytes = 0;  // memory traffic of packing blocks of inner dims
  double seconds = 0;
  int collectives = 0;

  constexpr comm_estimate& operator+=(const comm_estimate& o) {
    bus_bytes += o.bus_bytes;
    packed_bytes += o.packed_bytes;
    seconds += o.seconds;
    collectives += o.collectives;
    return *this;
  }
};

// Product of the sizes of the mesh axes that split dim D.
template <class D, class MeshT>
constexpr double split_of(const MeshT& mesh) {
  return [&]<class... As>(type_list<As...>) {
    return (1.0 * ... * static_cast<double>(mesh.template size<As>()));
  }(typename D::axes{});
}

// How many blocks tensor type Tn is cut into: its global elements / each rank's elements.
template <class Tn, class MeshT>
constexpr double shard_count(const MeshT& mesh) {
  return [&]<class... Ds>(type_list<Ds...>) {
    return (1.0 * ... * split_of<Ds>(mesh));
  }(typename Tn::dims{});
}

namespace detail {

// A collective over axis A moving factor_numerator * (n-1)/n * s_bytes; when `packed`, plus a
// read and a write of the s_bytes block at memory bandwidth.
template <class A, class Sys>
constexpr comm_estimate collective(const Sys& sys, double s_bytes, double factor_numerator,
                                   bool packed = false) {
  const double n = sys.template size<A>();
  if (n == 1) return {};
  const double bus = factor_numerator * (n - 1) / n * s_bytes;
  const double pack = packed && sys.price_packing ? 2 * s_bytes : 0;
  return {bus, pack, bus / sys.template bandwidth<A>() + pack / sys.hardware.memory_bw, 1};
}

// Whether dim D is not the first dim of operand type Tn (its blocks are then packed).
template <class Tn, class D>
inline constexpr bool packed_v = dim_position_v<D, typename Tn::dims> > 0;

// One step on operand type Tn of `elements` local elements; updates elements to its output.
template <class Tn, class A, class D, class Sys>
constexpr comm_estimate step_cost(AllGather<A, D>, double& elements, const Sys& sys, double bpe) {
  elements *= sys.template size<A>();
  return collective<A>(sys, elements * bpe, 1, packed_v<Tn, D>);
}
template <class Tn, class A, class D, class Sys>
constexpr comm_estimate step_cost(ReduceScatter<A, D>, double& elements, const Sys& sys,
                                  double bpe) {
  const comm_estimate c = collective<A>(sys, elements * bpe, 1, packed_v<Tn, D>);
  elements /= sys.template size<A>();
  return c;
}
template <class Tn, class A, class Sys>
constexpr comm_estimate step_cost(AllReduce<A>, double& elements, const Sys& sys, double bpe) {
  return collective<A>(sys, elements * bpe, 2);
}
template <class Tn, class A, class F, class T, class Sys>
constexpr comm_estimate step_cost(AllToAll<A, F, T>, double& elements, const Sys& sys, double bpe) {
  return collective<A>(sys, elements * bpe, 1, true);
}
template <class Tn, class A, class D, class Sys>
constexpr comm_estimate step_cost(Slice<A, D>, double& elements, const Sys& sys, double) {
  elements /= sys.template size<A>();
  return {};
}
template <class Tn, class A, class D, class Sys>
constexpr comm_estimate step_cost(Embed<A, D>, double& elements, const Sys& sys, double) {
  elements *= sys.template size<A>();
  return {};
}

}  // namespace detail

// The collectives of `Steps` applied to an operand of type Tn (whose dims say which blocks are
// packed) holding `elements` local elements of `bpe` bytes; `elements` ends as the operand's
// local size after them.
template <class Tn, class... Steps, class Sys>
constexpr comm_estimate steps_cost(type_list<Steps...>, double& elements,
                                   [[maybe_unused]] const Sys& sys, [[maybe_unused]] double bpe) {
  comm_estimate total;
  ((total += detail::step_cost<Tn>(Steps{}, elements, sys, bpe)), ...);
  return total;
}

}  // namespace tpx::cost

// CollectiveDescriptor: which collective a rank is calling, in a few comparable numbers.
//
// Collectives are matched by order, not by name: the n-th call of every rank of a group is
// taken to be the same operation. When control flow diverges between ranks that assumption
// breaks, and reading a peer's buffer as if it held something else corrupts memory or hangs.
// Every host collective therefore publishes one of these beside its buffers, and the group
// compares them before anyone reads a peer's data: operation, element type, element count, root,
// the reduction of an all_reduce (sum or max) and a digest of the per-rank counts. describe()
// turns one into the words of the error message (comm/group_name.hpp names ranks and groups).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "tpx/comm/communicator.hpp"

namespace tpx::detail {

enum class CollectiveOp : std::uint8_t {
  barrier,
  all_gather,
  reduce_scatter,
  all_reduce,
  all_to_all,
  broadcast,
  send,  // point to point, between two ranks of a group
  recv
};

constexpr std::string_view op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::barrier:
      return "barrier";
    case CollectiveOp::all_gather:
      return "all_gather";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
    case CollectiveOp::all_reduce:
      return "all_reduce";
    case CollectiveOp::all_to_all:
      return "all_to_all";
    case CollectiveOp::broadcast:
      return "broadcast";
    case CollectiveOp::send:
      return "send";
    case CollectiveOp::recv:
      return "recv";
  }
  return "unknown collective";
}

struct CollectiveDescriptor {
  CollectiveOp op = CollectiveOp::barrier;
  std::string_view element;           // "float" or "bf16"; empty for barrier
  std::size_t elements = 0;           // all_gather, reduce_scatter, all_to_all: the sum of the
                                      // counts; all_reduce, broadcast: the elements of one rank
  std::uint64_t counts_digest = 0;    // counts_digest() of the per-rank counts, 0 if none
  int root = -1;                      // broadcast's root; send's destination, recv's source
  reduction reduce = reduction::sum;  // all_reduce only

  friend bool operator==(const CollectiveDescriptor&, const CollectiveDescriptor&) = default;
};

// "float", "bf16": the element types the communicators serve, as the messages name them.
template <class T>
constexpr std::string_view element_name = std::is_same_v<T, float> ? "float" : "bf16";

// FNV-1a over the counts: equal counts give equal digests, and differing ones almost never do.
inline std::uint64_t counts_digest(std::span<const std::size_t> counts) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (std::size_t count : counts) {
    hash = (hash ^ static_cast<std::uint64_t>(count)) * 0x100000001b3ull;
  }
  return hash;
}

// The descriptor of a collective on elements named `element`; counts (per rank, may be empty)
// enter as their digest.
inline CollectiveDescriptor collective_call(CollectiveOp op, std::string_view element,
                                            std::size_t elements,
                                            std::span<const std::size_t> counts, int root = -1,
                                            reduction reduce = reduction::sum) {
  return {.op = op,
          .element = element,
          .elements = elements,
          .counts_digest = counts.empty() ? 0 : counts_digest(counts),
          .root = root,
          .reduce = reduce};
}
// ... on elements of type T (float or bf16).
template <class T>
CollectiveDescriptor collective_call(CollectiveOp op, std::size_t elements,
                                     std::span<const std::size_t> counts, int root = -1,
                                     reduction reduce = reduction::sum) {
  return collective_call(op, element_name<T>, elements, counts, root, reduce);
}

// "barrier", "all_gather<float> of 12 elements", "broadcast<bf16> of 5 elements from rank 1",
// "all_reduce(max)<float> of 4 elements" (a sum, the default, is not named, as in the call),
// "send<float> of 8 elements to rank 1" (group ranks).
inline std::string describe(const CollectiveDescriptor& call) {
  std::string text(op_name(call.op));
  if (call.op == CollectiveOp::barrier) return text;
  // Appended piece by piece: `"<" + std::string(...)` trips GCC 12's -Wrestrict at -O3.
  if (call.reduce != reduction::sum) {
    text += '(';
    text += reduction_name(call.reduce);
    text += ')';
  }
  text += '<';
  text += call.element;
  text += "> of ";
  text += std::to_string(call.elements);
  text += " elements";
  if (call.op == CollectiveOp::broadcast || call.op == CollectiveOp::recv) {
    text += " from rank ";
    text += std::to_string(call.root);
  } else if (call.op == CollectiveOp::send) {
    text += " to rank ";
    text += std::to_string(call.root);
  }
  return text;
}

}  // namespace tpx::detail

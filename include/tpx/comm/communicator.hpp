// What tpx asks of a communicator: a group of ranks that move bytes and reduce numbers together.
//
// The typed collectives of ops/ (all_gather<Axis>, reduce_scatter<Axis, Dim>, ...) work out
// from the tensor types which ranks talk, how many elements each contributes and where they
// land; they then call one of these untyped-by-sharding operations on the communicator of the
// mesh axis (or axis set) involved. Nothing here knows about tensors, dims or matmul.
//
// Every operation is collective: all ranks of the group call it, in the same order. Counts may
// differ between ranks (shards of a dim that does not divide evenly), so the gather/scatter
// operations take the per-rank counts explicitly, in group-rank order; every rank passes the same
// counts. Elements are laid out rank after rank, rank 0 first. all_reduce combines the ranks'
// values by a `reduction`: a sum by default, or a maximum (vocab-parallel cross-entropy needs the
// row maximum of logits sharded over the vocabulary). A maximum is exact in any element type; a
// NaN input makes the result NaN on the host and simulated communicators (NCCL's ncclMax keeps
// the other operand instead, see cuda/nccl_communicator.hpp).
//
// The host communicator (host_communicator.hpp) implements this over shared memory for ranks
// that are threads of one process; the NCCL and MPI communicators implement it over the network.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

#include "tpx/core/bfloat16.hpp"

namespace tpx {

// Thrown by every collective of a group in which some rank failed, that a returned rank never
// joined, that is deadlocked (host backend), or that timed out. The message names the failing
// rank (in world numbering) and what it reported, the ranks that returned without joining, who
// waits where, or the ranks that never arrived, so a user never faces a silent hang.
class comm_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How all_reduce combines the ranks' values, element by element: the sum (the default) or the
// maximum (kernels::max_reducer's; NaN handling as at the top of the file).
enum class reduction { sum, max };

// "sum", "max": the words the error messages and profiler ranges use.
constexpr const char* reduction_name(reduction op) { return op == reduction::max ? "max" : "sum"; }

template <class C, class T>
concept CommunicatorFor = requires(C& c, std::span<const T> in, std::span<T> out,
                                   std::span<const std::size_t> counts, int root, reduction op) {
  { c.size() } -> std::convertible_to<int>;  // ranks in the group
  { c.rank() } -> std::convertible_to<int>;  // this rank's index in the group, 0..size()-1
  c.barrier();
  // out = concatenation of every rank's `in`; counts[r] = elements from rank r (in.size() == counts[rank]).
  c.all_gather(in, out, counts);
  // out = this rank's block of the elementwise sum of every rank's `in`; in is laid out in
  // blocks of counts[0], counts[1], ...; out.size() == counts[rank].
  c.reduce_scatter(in, out, counts);
  // out = elementwise sum over ranks of `in` (in and out may alias); with `op`, their
  // elementwise reduction::sum or reduction::max.
  c.all_reduce(in, out);
  c.all_reduce(in, out, op);
  // Rank r sends block s of its `in` (send_counts[r * size + s] elements) to rank s, which
  // stores it as block r of its `out`. The full size x size matrix of counts is passed on
  // every rank.
  c.all_to_all(in, out, counts);
  // out on every rank = root's `in` (out.size() == in.size() on root).
  c.broadcast(in, out, root);
};

// A communicator serves the element types tpx stores: fp32 and bf16 (reduced in fp32).
template <class C>
concept Communicator = CommunicatorFor<C, float> && CommunicatorFor<C, bf16>;

}  // namespace tpx

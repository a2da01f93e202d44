// CallRecord: what one rank of a group says, in the signature exchange before each collective,
// about the collective it is about to run, or that it has returned from the SPMD function and
// will run none; the sentence naming who differs when a group's records disagree; and the
// exchange itself over any transport that can all-gather a few 64-bit words.
//
// MPI and NCCL match the collectives of a communicator by order alone, so ranks whose control
// flow went different ways would otherwise pair one rank's all_gather with another's all_reduce,
// or wait for a collective a peer never calls. Their communicators therefore gather one record
// from every rank of the group before the data moves (mpi_communicator.hpp always; the NCCL
// communicator when asked: cuda/nccl_communicator.hpp) and call check_same_records, which throws
// comm_error on every rank, with the same words everywhere (each has the same records), unless
// all are equal:
//   "tpx: mismatched collectives on group {0,1,2,3} (mesh axes X, Y) at collective #2: world
//    ranks {0,2,3} called all_reduce<float> of 8 elements but world rank 1 (host node1) called
//    all_gather<float> of 16 elements"
//   "tpx: collective #2 on group {0,1,2,3} (mesh axes X, Y), all_reduce<float> of 8 elements,
//    can never complete: world ranks {0,1,2} joined it but world rank 3 (host node1) returned
//    without joining it. Is a collective inside rank-dependent control flow, ...?"
// (the thread backend's words, host_group.hpp, with the hosts a cluster user needs: MPI knows
// them, and the NCCL mesh gathers them). The ranks that agree most are named first; the others,
// each with its host, after.
//
// Point-to-point calls are checked in pairs (the NCCL communicator, when asked): before a send,
// the sender and its receiver swap records, and check_pair_records throws the same comm_error on
// both unless one sends to the other what the other receives from it:
//   "tpx: mismatched point-to-point calls on group {0,1} (mesh axis X) at call #1 between world
//    ranks 0 and 1: world rank 0 called send<float> of 8 elements to rank 1 but world rank 1
//    (host node1) called recv<float> of 4 elements from rank 0"
//
// A record is six 64-bit integers (MPI_UINT64_T, ncclUint64 on the wire): the
// CollectiveDescriptor's fields, the element type's name packed into one of them. It carries no
// sequence number: each rank counts the exchanges of a communicator, and in-order matching makes
// the n-th exchange of every rank the same one, so the numbers could never differ; the count
// names the collective in messages (and, on MPI, in the heartbeat: mpi_watchdog.hpp) instead.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tpx/comm/collective_descriptor.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/comm/group_name.hpp"

namespace tpx::detail {

struct CallRecord {
  enum Kind : std::uint64_t { calls = 1, returned = 2 };
  std::uint64_t kind = calls;
  std::uint64_t op_and_reduction = 0;  // CollectiveOp | reduction << 8
  std::uint64_t element = 0;           // the element type's name, up to 8 bytes, low byte first
  std::uint64_t elements = 0;
  std::uint64_t counts_digest = 0;
  std::uint64_t root = 0;  // CollectiveDescriptor::root as two's complement (-1: none)

  friend bool operator==(const CallRecord&, const CallRecord&) = default;
};
inline constexpr int call_record_words = 6;
static_assert(sizeof(CallRecord) == call_record_words * sizeof(std::uint64_t),
              "a CallRecord travels as six 64-bit words");

inline CallRecord record_of(const CollectiveDescriptor& call) {
  CallRecord record;
  record.op_and_reduction =
      static_cast<std::uint64_t>(call.op) | static_cast<std::uint64_t>(call.reduce) << 8;
  const std::size_t letters = std::min<std::size_t>(call.element.size(), 8);
  for (std::size_t i = 0; i < letters; ++i)
    record.element |= static_cast<std::uint64_t>(static_cast<unsigned char>(call.element[i]))
                      << (8 * i);
  record.elements = call.elements;
  record.counts_digest = call.counts_digest;
  record.root = static_cast<std::uint64_t>(static_cast<std::int64_t>(call.root));
  return record;
}

inline CallRecord returned_record() { return CallRecord{.kind = CallRecord::returned}; }

// "all_reduce<float> of 8 elements" (describe() of the descriptor it was made from).
inline std::string describe(const CallRecord& record) {
  std::string element;
  for (std::uint64_t bytes = record.element; bytes != 0; bytes >>= 8)
    element += static_cast<char>(bytes & 0xff);
  return describe(
      CollectiveDescriptor{.op = static_cast<CollectiveOp>(record.op_and_reduction & 0xff),
                           .element = element,
                           .elements = static_cast<std::size_t>(record.elements),
                           .counts_digest = record.counts_digest,
                           .root = static_cast<int>(static_cast<std::int64_t>(record.root)),
                           .reduce = static_cast<reduction>(record.op_and_reduction >> 8)});
}

// "world rank 3 (host node1)", "world ranks 1 (host node0), 3 (host node1)": ranks a user must
// find, with their hosts if known (`hosts` empty: "world ranks 1, 3"; the first 8, then how many
// more).
inline std::string ranks_on_hosts(std::span<const int> world_ranks,
                                  std::span<const std::string> hosts) {
  std::string text = world_ranks.size() == 1 ? "world rank " : "world ranks ";
  for (std::size_t i = 0; i < world_ranks.size() && i < 8; ++i) {
    if (i != 0) text += ", ";
    text += std::to_string(world_ranks[i]);
    if (hosts.empty()) continue;
    text += " (host ";
    text += hosts[static_cast<std::size_t>(world_ranks[i])];
    text += ')';
  }
  if (world_ranks.size() > 8) text += " and " + std::to_string(world_ranks.size() - 8) + " more";
  return text;
}

// "world rank 2", "world ranks {0,2,3}": ranks that did what was expected.
inline std::string ranks_plainly(std::span<const int> world_ranks) {
  return world_ranks.size() == 1 ? "world rank " + std::to_string(world_ranks[0])
                                 : "world ranks " + bracketed(world_ranks);
}

// Throws comm_error, worded as at the top of the file, unless every rank's record (`records`, in
// group-rank order) is the same. `group` names the group ("group {0,1} (mesh axis Y)"),
// `world_ranks` its members, `hosts` every world rank's host (or none: ranks are named without);
// `sequence` numbers the collective.
inline void check_same_records(std::span<const CallRecord> records, const std::string& group,
                               std::span<const int> world_ranks, std::span<const std::string> hosts,
                               std::uint64_t sequence) {
  if (std::all_of(records.begin(), records.end(),
                  [&](const CallRecord& r) { return r == records[0]; }))
    return;
  // The distinct records and who sent each, the most common first (ties: in group-rank order).
  struct Callers {
    CallRecord record;
    std::vector<int> world_ranks;
    std::size_t first_caller;  // the group rank that made this call first
  };
  std::vector<Callers> calls;
  for (std::size_t r = 0; r < records.size(); ++r) {
    auto same = std::find_if(calls.begin(), calls.end(),
                             [&](const Callers& c) { return c.record == records[r]; });
    if (same == calls.end()) same = calls.insert(calls.end(), Callers{records[r], {}, r});
    same->world_ranks.push_back(world_ranks[r]);
  }
  // The most callers first, ties in the order the calls were first seen (std::sort with that
  // tie-break: libstdc++ 12's std::stable_sort warns under clang 19, get_temporary_buffer).
  std::sort(calls.begin(), calls.end(), [](const Callers& a, const Callers& b) {
    if (a.world_ranks.size() != b.world_ranks.size())
      return a.world_ranks.size() > b.world_ranks.size();
    return a.first_caller < b.first_caller;
  });
  const auto returned = std::find_if(calls.begin(), calls.end(), [](const Callers& c) {
    return c.record.kind == CallRecord::returned;
  });
  const std::string number = "collective #" + std::to_string(sequence);
  std::string what;
  if (returned != calls.end()) {
    const Callers gone = *returned;
    calls.erase(returned);
    what = number + " on " + group + ", " + describe(calls[0].record) +
           ", can never complete: " + ranks_plainly(calls[0].world_ranks) + " joined it";
    for (std::size_t c = 1; c < calls.size(); ++c)
      what += ", " + ranks_on_hosts(calls[c].world_ranks, hosts) + " called " +
              describe(calls[c].record) + " instead";
    what += " but " + ranks_on_hosts(gone.world_ranks, hosts) +
            " returned without joining it. Is a collective inside rank-dependent control flow, "
            "e.g. `if (rank.world_rank() == 0)`?";
  } else {
    const std::string first = describe(calls[0].record);
    what = "mismatched collectives on " + group + " at " + number + ": " +
           ranks_plainly(calls[0].world_ranks) + " called " + first;
    for (std::size_t c = 1; c < calls.size(); ++c) {
      const std::string other = describe(calls[c].record);
      what += (c == 1 ? " but " : ", ") + ranks_on_hosts(calls[c].world_ranks, hosts) + " called " +
              other + (other == first ? " with different per-rank counts" : "");
    }
  }
  throw comm_error("tpx: " + what);
}

// Throws comm_error, worded as at the top of the file, on both ranks of a point-to-point call
// alike, unless `mine` (group rank `me`) and `theirs` (group rank `peer`) are a send and a recv
// of the same elements between the two. `world_ranks` are the group's members, `hosts` every
// world rank's host (or none), `sequence` numbers the pair's calls.
inline void check_pair_records(const CallRecord& mine, int me, const CallRecord& theirs, int peer,
                               const std::string& group, std::span<const int> world_ranks,
                               std::span<const std::string> hosts, std::uint64_t sequence) {
  const auto op = [](const CallRecord& r) {
    return static_cast<CollectiveOp>(r.op_and_reduction & 0xff);
  };
  const auto to = [](const CallRecord& r) {
    return static_cast<int>(static_cast<std::int64_t>(r.root));
  };
  const bool complementary = (op(mine) == CollectiveOp::send && op(theirs) == CollectiveOp::recv) ||
                             (op(mine) == CollectiveOp::recv && op(theirs) == CollectiveOp::send);
  if (mine.kind == CallRecord::calls && theirs.kind == CallRecord::calls && complementary &&
      to(mine) == peer && to(theirs) == me && mine.element == theirs.element &&
      mine.elements == theirs.elements)
    return;
  // The lower group rank first, so that both ranks write the same words.
  const bool mine_first = me < peer;
  const int first = world_ranks[static_cast<std::size_t>(mine_first ? me : peer)];
  const int second = world_ranks[static_cast<std::size_t>(mine_first ? peer : me)];
  const CallRecord& first_call = mine_first ? mine : theirs;
  const CallRecord& second_call = mine_first ? theirs : mine;
  throw comm_error(
      "tpx: mismatched point-to-point calls on " + group + " at call #" + std::to_string(sequence) +
      " between world ranks " + std::to_string(first) + " and " + std::to_string(second) +
      ": world rank " + std::to_string(first) + " called " + describe(first_call) + " but " +
      ranks_on_hosts(std::span<const int>(&second, 1), hosts) + " called " + describe(second_call));
}

// check_same_records over the words an all-gather of every rank's record left, in group-rank
// order (call_record_words per rank).
inline void check_gathered_records(std::span<const std::uint64_t> words, const std::string& group,
                                   std::span<const int> world_ranks,
                                   std::span<const std::string> hosts, std::uint64_t sequence) {
  std::vector<CallRecord> records(words.size() / call_record_words);
  for (std::size_t r = 0; r < records.size(); ++r) {
    std::array<std::uint64_t, call_record_words> record;
    std::copy_n(words.begin() + static_cast<std::ptrdiff_t>(r * call_record_words),
                call_record_words, record.begin());
    records[r] = std::bit_cast<CallRecord>(record);
  }
  check_same_records(records, group, world_ranks, hosts, sequence);
}

// The signature exchange, whatever carries it: `all_gather_words(mine, all)` must return once
// `all` holds every rank's call_record_words words, in group-rank order (mine among them), or
// throw. Returns when every rank of the group sent `mine`, else throws check_same_records's
// comm_error, on every rank alike. `sequence` numbers the exchange on the group (1, 2, ...).
template <class AllGatherWords>
  requires std::invocable<AllGatherWords&, std::span<const std::uint64_t>,
                          std::span<std::uint64_t>>
void exchange_records(const CallRecord& mine, std::uint64_t sequence, const std::string& group,
                      std::span<const int> world_ranks, std::span<const std::string> hosts,
                      AllGatherWords&& all_gather_words) {
  const auto words = std::bit_cast<std::array<std::uint64_t, call_record_words>>(mine);
  std::vector<std::uint64_t> all(world_ranks.size() * call_record_words);
  all_gather_words(std::span<const std::uint64_t>(words), std::span<std::uint64_t>(all));
  check_gathered_records(all, group, world_ranks, hosts, sequence);
}

}  // namespace tpx::detail

// The signature records of the MPI and NCCL backends and the sentence that names who differs
// (comm/call_record.hpp), without MPI: the cases the MPI tests (tests/mpi/mpi_desync_test.cpp)
// cannot reach with four processes of one program, each checked against a sentence written out
// by hand from the rules at the top of that header:
//   - a record carries everything describe() says of a call (every op, both element types, the
//     reduction, the root), so the words on every rank name what each rank called;
//   - equal records (every rank calls the same, or every rank returned) pass;
//   - the ranks that agree most are named first, plainly; every other rank with its host, up to 8;
//   - a rank that added a collective at the end meets the others' "returned" records;
//   - calls that differ only in per-rank counts say so;
//   - without hosts, ranks are named by world rank alone;
//   - a send and the recv it meets pass; a pair that differs in size, type or direction fails on
//     both ranks with the same words, the lower group rank first.
#include <doctest/doctest.h>

#include <string>
#include <tpx/comm/call_record.hpp>
#include <vector>

namespace {

using tpx::detail::CallRecord;
using tpx::detail::CollectiveDescriptor;
using tpx::detail::CollectiveOp;

const std::vector<std::string> hosts{"node0", "node1", "node2", "node3", "node4", "node5",
                                     "node6", "node7", "node8", "node9", "node10", "node11"};

// check_same_records' message for `records` of the group of world ranks `members`, collective #5
// ("" when it passes).
std::string verdict(const std::vector<CallRecord>& records, const std::vector<int>& members) {
  try {
    tpx::detail::check_same_records(records, "group G", members, hosts, 5);
  } catch (const tpx::comm_error& e) {
    return e.what();
  }
  return "";
}

CallRecord all_reduce_of(std::size_t n) {
  return tpx::detail::record_of(
      tpx::detail::collective_call<float>(CollectiveOp::all_reduce, n, {}));
}

}  // namespace

TEST_CASE("a record says what describe() says of the call it was made from") {
  const std::vector<std::size_t> counts{3, 5};
  const std::vector<CollectiveDescriptor> calls{
      CollectiveDescriptor{},
      tpx::detail::collective_call<float>(CollectiveOp::all_gather, 8, counts),
      tpx::detail::collective_call<tpx::bf16>(CollectiveOp::reduce_scatter, 8, counts),
      tpx::detail::collective_call<float>(CollectiveOp::all_reduce, 7, {}, -1,
                                          tpx::reduction::max),
      tpx::detail::collective_call<tpx::bf16>(CollectiveOp::all_to_all, 16, counts),
      tpx::detail::collective_call<float>(CollectiveOp::broadcast, 4, {}, 1),
      tpx::detail::collective_call<float>(CollectiveOp::send, 8, {}, 1),
      tpx::detail::collective_call<tpx::bf16>(CollectiveOp::recv, 3, {}, 0)};
  const std::vector<std::string> words{"barrier",
                                       "all_gather<float> of 8 elements",
                                       "reduce_scatter<bf16> of 8 elements",
                                       "all_reduce(max)<float> of 7 elements",
                                       "all_to_all<bf16> of 16 elements",
                                       "broadcast<float> of 4 elements from rank 1",
                                       "send<float> of 8 elements to rank 1",
                                       "recv<bf16> of 3 elements from rank 0"};
  for (std::size_t i = 0; i < calls.size(); ++i) {
    CHECK(describe(tpx::detail::record_of(calls[i])) == words[i]);
    CHECK(describe(tpx::detail::record_of(calls[i])) == describe(calls[i]));
    for (std::size_t j = 0; j < calls.size(); ++j)
      CHECK((tpx::detail::record_of(calls[i]) == tpx::detail::record_of(calls[j])) == (i == j));
  }
}

TEST_CASE("equal records pass, whether every rank calls the same or every rank returned") {
  CHECK(verdict({all_reduce_of(8), all_reduce_of(8), all_reduce_of(8)}, {0, 1, 2}).empty());
  const CallRecord gone = tpx::detail::returned_record();
  CHECK(verdict({gone, gone}, {4, 6}).empty());
}

TEST_CASE("a rank that added a collective at the end meets the others' returns") {
  const CallRecord gone = tpx::detail::returned_record();
  CHECK(verdict({gone, gone, tpx::detail::record_of(CollectiveDescriptor{}), gone},
                {0, 1, 2, 3}) ==
        "tpx: collective #5 on group G, barrier, can never complete: world rank 2 joined it but "
        "world ranks 0 (host node0), 1 (host node1), 3 (host node3) returned without joining it. "
        "Is a collective inside rank-dependent control flow, e.g. `if (rank.world_rank() == 0)`?");
}

TEST_CASE("three different calls: the most common first, the others each with its host") {
  CHECK(verdict({all_reduce_of(8), all_reduce_of(4), all_reduce_of(8), all_reduce_of(2)},
                {4, 5, 6, 7}) ==
        "tpx: mismatched collectives on group G at collective #5: world ranks {4,6} called "
        "all_reduce<float> of 8 elements but world rank 5 (host node5) called all_reduce<float> "
        "of 4 elements, world rank 7 (host node7) called all_reduce<float> of 2 elements");
}

TEST_CASE("two ranks that disagree are named in group-rank order") {
  CHECK(verdict({all_reduce_of(8), all_reduce_of(4)}, {2, 3}) ==
        "tpx: mismatched collectives on group G at collective #5: world rank 2 called "
        "all_reduce<float> of 8 elements but world rank 3 (host node3) called all_reduce<float> "
        "of 4 elements");
}

TEST_CASE("calls that differ in per-rank counts only say so") {
  const std::vector<std::size_t> even{2, 2}, uneven{1, 3};
  const auto gather = [](const std::vector<std::size_t>& counts) {
    return tpx::detail::record_of(
        tpx::detail::collective_call<float>(CollectiveOp::all_gather, 4, counts));
  };
  CHECK(verdict({gather(even), gather(uneven)}, {0, 1}) ==
        "tpx: mismatched collectives on group G at collective #5: world rank 0 called "
        "all_gather<float> of 4 elements but world rank 1 (host node1) called all_gather<float> "
        "of 4 elements with different per-rank counts");
}

TEST_CASE("many returned ranks: the first 8 are named, then how many more") {
  std::vector<CallRecord> records(12, tpx::detail::returned_record());
  std::vector<int> members;
  for (int r = 0; r < 12; ++r) members.push_back(r);
  records[0] = records[1] = all_reduce_of(8);
  CHECK(verdict(records, members) ==
        "tpx: collective #5 on group G, all_reduce<float> of 8 elements, can never complete: "
        "world ranks {0,1} joined it but world ranks 2 (host node2), 3 (host node3), 4 (host "
        "node4), 5 (host node5), 6 (host node6), 7 (host node7), 8 (host node8), 9 (host node9) "
        "and 2 more returned without joining it. Is a collective inside rank-dependent control "
        "flow, e.g. `if (rank.world_rank() == 0)`?");
}

TEST_CASE("without hosts, the ranks that differ are named by world rank alone") {
  try {
    const std::vector<CallRecord> records{all_reduce_of(8), all_reduce_of(8), all_reduce_of(4)};
    tpx::detail::check_same_records(records, "group G", std::vector<int>{1, 3, 5}, {}, 2);
    FAIL("records that differ passed");
  } catch (const tpx::comm_error& e) {
    CHECK(std::string(e.what()) ==
          "tpx: mismatched collectives on group G at collective #2: world ranks {1,3} called "
          "all_reduce<float> of 8 elements but world rank 5 called all_reduce<float> of 4 "
          "elements");
  }
}

namespace {
// check_pair_records' message when group rank `me` (of the group of world ranks {4, 5}) calls
// `mine` and its peer `theirs`, point-to-point call #3 ("" when it passes).
std::string pair_verdict(const CollectiveDescriptor& mine, int me,
                         const CollectiveDescriptor& theirs) {
  try {
    tpx::detail::check_pair_records(tpx::detail::record_of(mine), me,
                                    tpx::detail::record_of(theirs), 1 - me, "group G",
                                    std::vector<int>{4, 5}, hosts, 3);
  } catch (const tpx::comm_error& e) {
    return e.what();
  }
  return "";
}
template <class T>
CollectiveDescriptor point_to_point(CollectiveOp op, std::size_t n, int peer) {
  return tpx::detail::collective_call<T>(op, n, {}, peer);
}
}  // namespace

TEST_CASE("a send and the recv it meets pass; any other pair fails on both ranks alike") {
  const auto send_8 = point_to_point<float>(CollectiveOp::send, 8, 1);
  const auto recv_8 = point_to_point<float>(CollectiveOp::recv, 8, 0);
  CHECK(pair_verdict(send_8, 0, recv_8).empty());
  CHECK(pair_verdict(recv_8, 1, send_8).empty());
  // Rank 1 of the pair sends to rank 0, which receives from it.
  CHECK(pair_verdict(point_to_point<float>(CollectiveOp::recv, 8, 1), 0,
                     point_to_point<float>(CollectiveOp::send, 8, 0))
            .empty());

  const auto both_views = [](const CollectiveDescriptor& first,
                             const CollectiveDescriptor& second) {
    const std::string from_first = pair_verdict(first, 0, second);
    CHECK(pair_verdict(second, 1, first) == from_first);
    return from_first;
  };
  CHECK(both_views(send_8, point_to_point<float>(CollectiveOp::recv, 4, 0)) ==
        "tpx: mismatched point-to-point calls on group G at call #3 between world ranks 4 and 5: "
        "world rank 4 called send<float> of 8 elements to rank 1 but world rank 5 (host node5) "
        "called recv<float> of 4 elements from rank 0");
  CHECK(both_views(send_8, point_to_point<tpx::bf16>(CollectiveOp::recv, 8, 0)) ==
        "tpx: mismatched point-to-point calls on group G at call #3 between world ranks 4 and 5: "
        "world rank 4 called send<float> of 8 elements to rank 1 but world rank 5 (host node5) "
        "called recv<bf16> of 8 elements from rank 0");
  CHECK(both_views(send_8, point_to_point<float>(CollectiveOp::send, 8, 0)) ==
        "tpx: mismatched point-to-point calls on group G at call #3 between world ranks 4 and 5: "
        "world rank 4 called send<float> of 8 elements to rank 1 but world rank 5 (host node5) "
        "called send<float> of 8 elements to rank 0");
}

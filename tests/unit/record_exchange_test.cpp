// The signature exchange of comm/call_record.hpp (exchange_records), carried by the host
// backend's all_gather: the NCCL communicator runs the same function over ncclAllGather when
// asked to check collectives, and this test proves its verdicts without a GPU. Four ranks of a
// mesh axis X agree on two collectives, then diverge at the third:
//   - one rank calls another collective: every rank throws the same sentence, naming that rank,
//     both calls and the collective's number;
//   - one rank calls the same collective with another count: likewise;
//   - one rank sends the "returned" record: the others' collective can never complete;
//   - no rank diverges: nobody throws.
// Each expected sentence is written out from what the test sets up (ranks, ops, counts, the
// number of exchanges before), by the rules at the top of comm/call_record.hpp; hosts are not
// given (as on NCCL), so ranks are named by world rank alone.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <tpx/comm/call_record.hpp>
#include <tpx/spmd/spmd.hpp>
#include <vector>

namespace {
TPX_MESH_AXES(X);

using tpx::detail::CallRecord;
using tpx::detail::CollectiveOp;

constexpr int kRanks = 4;
const std::string kGroup = "group {0,1,2,3} (mesh axis X)";

CallRecord all_reduce_of(std::size_t n) {
  return tpx::detail::record_of(
      tpx::detail::collective_call<float>(CollectiveOp::all_reduce, n, {}));
}
CallRecord all_gather_of(std::size_t n) {
  const std::vector<std::size_t> counts(kRanks, n / kRanks);
  return tpx::detail::record_of(
      tpx::detail::collective_call<float>(CollectiveOp::all_gather, n, counts));
}

// Runs two agreeing exchanges (all_reduce of 8 on every rank), then a third with the record
// `third(world rank)`, on 4 ranks of the host backend, the words travelling through the group's
// float all_gather; returns what each rank's third exchange threw ("" if nothing).
std::vector<std::string> third_exchange(const std::function<CallRecord(int)>& third) {
  std::vector<std::string> thrown(kRanks);
  tpx::spmd(tpx::host, tpx::Mesh<X>{kRanks}, [&](auto& rank) {
    tpx::any_communicator& group = rank.template group<X>();
    const std::vector<int> world_ranks{0, 1, 2, 3};
    // A record's words as floats bit for bit (the host all_gather only copies them).
    const auto all_gather_words = [&](std::span<const std::uint64_t> mine,
                                      std::span<std::uint64_t> all) {
      std::vector<float> in(mine.size_bytes() / sizeof(float)), out(all.size_bytes() / sizeof(float));
      std::memcpy(in.data(), mine.data(), mine.size_bytes());
      const std::vector<std::size_t> counts(kRanks, in.size());
      group.all_gather(std::span<const float>(in), std::span<float>(out), counts);
      std::memcpy(all.data(), out.data(), all.size_bytes());
    };
    for (std::uint64_t sequence = 1; sequence <= 2; ++sequence)
      tpx::detail::exchange_records(all_reduce_of(8), sequence, kGroup, world_ranks, {},
                                    all_gather_words);
    try {
      tpx::detail::exchange_records(third(rank.world_rank()), 3, kGroup, world_ranks, {},
                                    all_gather_words);
    } catch (const tpx::comm_error& e) {
      thrown[static_cast<std::size_t>(rank.world_rank())] = e.what();
    }
  });
  return thrown;
}

void expect_every_rank_throws(const std::vector<std::string>& thrown, const std::string& what) {
  for (int r = 0; r < kRanks; ++r) {
    CAPTURE(r);
    CHECK(thrown[static_cast<std::size_t>(r)] == what);
  }
}

}  // namespace

TEST_CASE("ranks that call the same collective pass the exchange") {
  expect_every_rank_throws(third_exchange([](int) { return all_reduce_of(8); }), "");
}

TEST_CASE("rank 2 calling another collective makes every rank throw, naming it and both calls") {
  const auto thrown = third_exchange(
      [](int r) { return r == 2 ? all_gather_of(8) : all_reduce_of(8); });
  expect_every_rank_throws(
      thrown, "tpx: mismatched collectives on " + kGroup +
                  " at collective #3: world ranks {0,1,3} called all_reduce<float> of 8 elements "
                  "but world rank 2 called all_gather<float> of 8 elements");
}

TEST_CASE("rank 1 calling the same collective with another count makes every rank throw") {
  const auto thrown = third_exchange(
      [](int r) { return r == 1 ? all_reduce_of(16) : all_reduce_of(8); });
  expect_every_rank_throws(
      thrown, "tpx: mismatched collectives on " + kGroup +
                  " at collective #3: world ranks {0,2,3} called all_reduce<float> of 8 elements "
                  "but world rank 1 called all_reduce<float> of 16 elements");
}

TEST_CASE("rank 3 sending the returned record fails the collective the others joined") {
  const auto thrown = third_exchange(
      [](int r) { return r == 3 ? tpx::detail::returned_record() : all_reduce_of(8); });
  expect_every_rank_throws(
      thrown, "tpx: collective #3 on " + kGroup +
                  ", all_reduce<float> of 8 elements, can never complete: world ranks {0,1,2} "
                  "joined it but world rank 3 returned without joining it. Is a collective "
                  "inside rank-dependent control flow, e.g. `if (rank.world_rank() == 0)`?");
}

// Tests of the host communicator (comm/host_world.hpp, comm/host_communicator.hpp): every
// collective for fp32 and bf16 on groups of 1, 2, 3, 4 and 6 threads, with uneven counts and
// zeros, against naive loops, all_reduce both as a sum and as a maximum (with NaN and -inf
// among the inputs); sub-groups of a 2x2 world used at once; and the failure paths: abort
// propagation, a collective that a returned rank never joined (at once, whatever the timeout),
// timeout and mismatched collectives (a sum against a maximum included; the ranks that deviated
// from the call most ranks made, or every call when they tie), each of which must
// throw comm_error with a message naming the culprit and the collective's number on its group,
// within bounded time, on every rank. Last, the typed all_reduce_max<X> (ops/collectives.hpp) on a
// host mesh, through any_communicator: the row maxima of logits whose vocabulary is split over a
// mesh axis.
//
// Tolerance: none. Copies must be exact, the communicator promises sums in fp32 over the
// ranks in group-rank order, rounded once, which is exactly what the reference computes, and a
// maximum is exact; so every comparison is for equal values, NaN matching NaN (which also shows
// all ranks got the same result).
#include "tpx/comm/host_communicator.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "tpx/comm/any_communicator.hpp"
#include "tpx/comm/host_world.hpp"
#include "tpx/core/bfloat16.hpp"
#include "tpx/tpx.hpp"
#include "../support/collective_values.hpp"

namespace {

using namespace collective_values;
using tpx::bf16;
using tpx::comm_error;
using tpx::HostCommunicator;
using tpx::HostWorld;
using Counts = std::vector<std::size_t>;
using namespace std::chrono_literals;

// Runs fn(world_rank) on one thread per rank, as the SPMD launcher does: a rank that throws
// reports it through world.abort, one that returns through world.finish (unless told not to).
// Returns what each rank threw ("" if nothing).
std::vector<std::string> run_ranks(HostWorld& world, const std::function<void(int)>& fn,
                                   bool report_failures = true) {
  std::vector<std::string> errors(static_cast<std::size_t>(world.size()));
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < world.size(); ++r) {
      ranks.emplace_back([&, r] {
        try {
          fn(r);
          if (report_failures) world.finish(r);
        } catch (const std::exception& e) {
          errors[r] = e.what();
          if (report_failures) world.abort(r, e.what());
        }
      });
    }
  }
  return errors;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// "" if every element is equal (NaN matching NaN), else the first difference.
template <class T>
std::string mismatch(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float g = static_cast<float>(got[i]);
    const float w = static_cast<float>(want[i]);
    if (g != w && !(std::isnan(g) && std::isnan(w)))
      return "element " + std::to_string(i) + ": " + std::to_string(g) + " != " + std::to_string(w);
  }
  return "";
}

// Elementwise maximum over ranks, NaN if any input is NaN: the naive reference.
template <class T>
std::vector<T> naive_max(const std::vector<std::vector<T>>& inputs, std::size_t n) {
  std::vector<T> max(n);
  for (std::size_t i = 0; i < n; ++i) {
    float acc = -kInf;
    bool nan = false;
    for (const auto& in : inputs) {
      const float x = static_cast<float>(in[i]);
      if (std::isnan(x)) nan = true;
      if (x > acc) acc = x;
    }
    max[i] = static_cast<T>(nan ? kNaN : acc);
  }
  return max;
}

// Elementwise sum over ranks, in rank order, in fp32, rounded once: the naive reference.
template <class T>
std::vector<T> rank_order_sum(const std::vector<std::vector<T>>& inputs, std::size_t begin,
                              std::size_t n) {
  std::vector<T> sum(n);
  for (std::size_t i = 0; i < n; ++i) {
    float acc = 0.0f;
    for (const auto& in : inputs) acc += static_cast<float>(in[begin + i]);
    sum[i] = static_cast<T>(acc);
  }
  return sum;
}

const std::vector<int> kGroupSizes = {1, 2, 3, 4, 6};

// Per-rank counts: uneven with zeros, all zero, and large enough to span several sum tiles.
std::vector<Counts> count_patterns(int n) {
  std::vector<Counts> patterns(3, Counts(static_cast<std::size_t>(n)));
  const std::size_t uneven[] = {3, 0, 5, 1, 0, 4};
  for (int r = 0; r < n; ++r) {
    patterns[0][r] = uneven[r];
    patterns[1][r] = 0;
    patterns[2][r] = 700 + 37 * static_cast<std::size_t>(r);
  }
  return patterns;
}

constexpr tpx::HostWorldOptions kPatient{.timeout = 10s};

}  // namespace

TEST_CASE_TEMPLATE("all_gather concatenates every rank's block in rank order", T, float, bf16) {
  for (int n : kGroupSizes) {
    CAPTURE(n);
    const std::vector<Counts> patterns = count_patterns(n);
    std::vector<std::vector<std::vector<T>>> got(patterns.size(), std::vector<std::vector<T>>(n));
    HostWorld world(n, kPatient);
    const auto errors = run_ranks(world, [&](int r) {
      HostCommunicator comm(world, HostWorld::whole_world, r);
      for (std::size_t p = 0; p < patterns.size(); ++p) {
        const Counts& counts = patterns[p];
        const std::vector<T> in = values<T>(r, counts[r]);
        got[p][r].resize(std::accumulate(counts.begin(), counts.end(), std::size_t{0}));
        comm.all_gather(std::span<const T>(in), std::span<T>(got[p][r]), std::span(counts));
      }
    });
    for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
    for (std::size_t p = 0; p < patterns.size(); ++p) {
      std::vector<T> want;
      for (int s = 0; s < n; ++s) {
        const std::vector<T> block = values<T>(s, patterns[p][s]);
        want.insert(want.end(), block.begin(), block.end());
      }
      for (int r = 0; r < n; ++r) CHECK(mismatch(got[p][r], want) == "");
    }
  }
}

TEST_CASE_TEMPLATE("reduce_scatter gives each rank its block of the rank-order sum", T, float,
                   bf16) {
  for (int n : kGroupSizes) {
    CAPTURE(n);
    const std::vector<Counts> patterns = count_patterns(n);
    std::vector<std::vector<std::vector<T>>> got(patterns.size(), std::vector<std::vector<T>>(n));
    HostWorld world(n, kPatient);
    const auto errors = run_ranks(world, [&](int r) {
      HostCommunicator comm(world, HostWorld::whole_world, r);
      for (std::size_t p = 0; p < patterns.size(); ++p) {
        const Counts& counts = patterns[p];
        const std::vector<T> in =
            values<T>(r, std::accumulate(counts.begin(), counts.end(), std::size_t{0}));
        got[p][r].resize(counts[r]);
        comm.reduce_scatter(std::span<const T>(in), std::span<T>(got[p][r]), std::span(counts));
      }
    });
    for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
    for (std::size_t p = 0; p < patterns.size(); ++p) {
      const Counts& counts = patterns[p];
      const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      std::vector<std::vector<T>> inputs;
      for (int s = 0; s < n; ++s) inputs.push_back(values<T>(s, total));
      std::size_t begin = 0;
      for (int r = 0; r < n; ++r) {
        CHECK(mismatch(got[p][r], rank_order_sum(inputs, begin, counts[r])) == "");
        begin += counts[r];
      }
    }
  }
}

TEST_CASE_TEMPLATE("all_reduce sums in rank order, out of place and in place", T, float, bf16) {
  const std::vector<std::size_t> lengths = {0, 1, 5, 1000, 2051};
  for (int n : kGroupSizes) {
    CAPTURE(n);
    // got[length][in_place][rank]
    std::vector<std::vector<std::vector<std::vector<T>>>> got(
        lengths.size(),
        std::vector<std::vector<std::vector<T>>>(2, std::vector<std::vector<T>>(n)));
    HostWorld world(n, kPatient);
    const auto errors = run_ranks(world, [&](int r) {
      HostCommunicator comm(world, HostWorld::whole_world, r);
      for (std::size_t l = 0; l < lengths.size(); ++l) {
        const std::vector<T> in = values<T>(r, lengths[l]);
        got[l][0][r].resize(lengths[l]);
        comm.all_reduce(std::span<const T>(in), std::span<T>(got[l][0][r]));
        got[l][1][r] = in;
        comm.all_reduce(std::span<const T>(got[l][1][r]), std::span<T>(got[l][1][r]));
      }
    });
    for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
    for (std::size_t l = 0; l < lengths.size(); ++l) {
      std::vector<std::vector<T>> inputs;
      for (int s = 0; s < n; ++s) inputs.push_back(values<T>(s, lengths[l]));
      const std::vector<T> want = rank_order_sum(inputs, 0, lengths[l]);
      for (int r = 0; r < n; ++r) {
        CHECK(mismatch(got[l][0][r], want) == "");
        CHECK(mismatch(got[l][1][r], want) == "");
      }
    }
  }
}

TEST_CASE_TEMPLATE("all_reduce max takes the elementwise maximum, out of place and in place", T,
                   float, bf16) {
  // 9000 elements on one rank span two of all_reduce's outer tiles (8192).
  const std::vector<std::size_t> lengths = {0, 1, 5, 1000, 2051, 9000};
  for (int n : kGroupSizes) {
    CAPTURE(n);
    // got[length][in_place][rank]
    std::vector<std::vector<std::vector<std::vector<T>>>> got(
        lengths.size(),
        std::vector<std::vector<std::vector<T>>>(2, std::vector<std::vector<T>>(n)));
    HostWorld world(n, kPatient);
    const auto errors = run_ranks(world, [&](int r) {
      HostCommunicator comm(world, HostWorld::whole_world, r);
      for (std::size_t l = 0; l < lengths.size(); ++l) {
        const std::vector<T> in = values_with_specials<T>(r, lengths[l]);
        got[l][0][r].resize(lengths[l]);
        comm.all_reduce(std::span<const T>(in), std::span<T>(got[l][0][r]), tpx::reduction::max);
        got[l][1][r] = in;
        comm.all_reduce(std::span<const T>(got[l][1][r]), std::span<T>(got[l][1][r]),
                        tpx::reduction::max);
      }
    });
    for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
    for (std::size_t l = 0; l < lengths.size(); ++l) {
      CAPTURE(lengths[l]);
      std::vector<std::vector<T>> inputs;
      for (int s = 0; s < n; ++s) inputs.push_back(values_with_specials<T>(s, lengths[l]));
      const std::vector<T> want = naive_max(inputs, lengths[l]);
      for (int r = 0; r < n; ++r) {
        CHECK(mismatch(got[l][0][r], want) == "");
        CHECK(mismatch(got[l][1][r], want) == "");
      }
    }
  }
}

TEST_CASE_TEMPLATE("all_reduce max: NaN anywhere gives NaN, -inf is a value, sum stays the default",
                   T, float, bf16) {
  const std::vector<std::vector<float>> inputs = {
      {1.0f, kNaN, -kInf, -kInf, 2.0f, -0.0f, kNaN},
      {kNaN, 3.0f, -kInf, 5.0f, -kInf, 0.0f, kNaN},
      {0.0f, -1.0f, -kInf, -kInf, kNaN, -1.0f, kNaN},
  };
  const std::vector<T> want_max = {T(kNaN), T(kNaN), T(-kInf), T(5.0f), T(kNaN), T(0.0f), T(kNaN)};
  std::vector<std::vector<T>> max(3), sum(3);
  HostWorld world(3, kPatient);
  const auto errors = run_ranks(world, [&](int r) {
    // Through any_communicator, as the typed ops call it: its default is the sum too.
    tpx::communicator_model<HostCommunicator> model(
        HostCommunicator(world, HostWorld::whole_world, r));
    tpx::any_communicator& comm = model;
    max[r].assign(inputs[r].begin(), inputs[r].end());
    comm.all_reduce(std::span<const T>(max[r]), std::span<T>(max[r]), tpx::reduction::max);
    const std::vector<T> in = {T(1.0f), T(2.0f), T(-kInf)};
    sum[r].resize(in.size());
    comm.all_reduce(std::span<const T>(in), std::span<T>(sum[r]));
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(mismatch(max[r], want_max) == "");
    CHECK(mismatch(sum[r], std::vector<T>{T(3.0f), T(6.0f), T(-kInf)}) == "");
  }
}

static_assert(tpx::CommunicatorFor<tpx::any_communicator, float> &&
                  tpx::CommunicatorFor<tpx::any_communicator, bf16>,
              "any_communicator must offer all_reduce with and without a reduction");

TEST_CASE_TEMPLATE("all_to_all delivers block s of rank r as block r of rank s", T, float, bf16) {
  for (int n : kGroupSizes) {
    CAPTURE(n);
    // counts[from * n + to]: uneven with zeros, all zero, large.
    std::vector<Counts> patterns(3, Counts(static_cast<std::size_t>(n * n)));
    for (int from = 0; from < n; ++from) {
      for (int to = 0; to < n; ++to) {
        patterns[0][from * n + to] = static_cast<std::size_t>((from * 3 + to * 5) % 4);
        patterns[2][from * n + to] = static_cast<std::size_t>(300 + from * 11 + to);
      }
    }
    std::vector<std::vector<std::vector<T>>> got(patterns.size(), std::vector<std::vector<T>>(n));
    const auto sent_by = [&](const Counts& counts, int from) {
      std::size_t sum = 0;
      for (int to = 0; to < n; ++to) sum += counts[from * n + to];
      return sum;
    };
    HostWorld world(n, kPatient);
    const auto errors = run_ranks(world, [&](int r) {
      HostCommunicator comm(world, HostWorld::whole_world, r);
      for (std::size_t p = 0; p < patterns.size(); ++p) {
        const Counts& counts = patterns[p];
        const std::vector<T> in = values<T>(r, sent_by(counts, r));
        std::size_t received = 0;
        for (int from = 0; from < n; ++from) received += counts[from * n + r];
        got[p][r].resize(received);
        comm.all_to_all(std::span<const T>(in), std::span<T>(got[p][r]), std::span(counts));
      }
    });
    for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
    for (std::size_t p = 0; p < patterns.size(); ++p) {
      const Counts& counts = patterns[p];
      for (int r = 0; r < n; ++r) {
        std::vector<T> want;
        for (int from = 0; from < n; ++from) {
          const std::vector<T> in = values<T>(from, sent_by(counts, from));
          std::size_t begin = 0;
          for (int to = 0; to < r; ++to) begin += counts[from * n + to];
          want.insert(want.end(), in.begin() + static_cast<std::ptrdiff_t>(begin),
                      in.begin() + static_cast<std::ptrdiff_t>(begin + counts[from * n + r]));
        }
        CHECK(mismatch(got[p][r], want) == "");
      }
    }
  }
}

TEST_CASE_TEMPLATE("broadcast copies root's input to every rank, root in place too", T, float,
                   bf16) {
  const std::vector<std::size_t> lengths = {0, 7, 1000};
  for (int n : kGroupSizes) {
    CAPTURE(n);
    // got[length][root][rank]
    std::vector<std::vector<std::vector<std::vector<T>>>> got(
        lengths.size(),
        std::vector<std::vector<std::vector<T>>>(n, std::vector<std::vector<T>>(n)));
    HostWorld world(n, kPatient);
    const auto errors = run_ranks(world, [&](int r) {
      HostCommunicator comm(world, HostWorld::whole_world, r);
      for (std::size_t l = 0; l < lengths.size(); ++l) {
        for (int root = 0; root < n; ++root) {
          std::vector<T>& out = got[l][root][r];
          out.assign(lengths[l], static_cast<T>(-7.0f));
          if (r == root) out = values<T>(root, lengths[l], 1);  // the root broadcasts in place
          comm.broadcast(std::span<const T>(out), std::span<T>(out), root);
        }
      }
    });
    for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
    for (std::size_t l = 0; l < lengths.size(); ++l) {
      for (int root = 0; root < n; ++root) {
        for (int r = 0; r < n; ++r)
          CHECK(mismatch(got[l][root][r], values<T>(root, lengths[l], 1)) == "");
      }
    }
  }
}

TEST_CASE("barrier orders every rank's writes before every rank's reads") {
  const int n = 4;
  std::vector<int> written(n, 0);
  std::vector<int> seen(n, 0);
  HostWorld world(n, kPatient);
  const auto errors = run_ranks(world, [&](int r) {
    HostCommunicator comm(world, HostWorld::whole_world, r);
    written[r] = r + 1;
    comm.barrier();
    seen[r] = std::accumulate(written.begin(), written.end(), 0);
    comm.barrier();
  });
  for (int r = 0; r < n; ++r) {
    CHECK(errors[r] == "");
    CHECK(seen[r] == 10);
  }
}

TEST_CASE("back-to-back collectives never read a peer's previous publication") {
  // A barrier has one meeting: a rank leaving it may publish its next call while a slow peer
  // still checks the barrier's. Many quick alternations make that overlap happen.
  const int n = 4;
  const int steps = 500;
  std::vector<std::vector<float>> got(n);
  HostWorld world(n, kPatient);
  const auto errors = run_ranks(world, [&](int r) {
    HostCommunicator comm(world, HostWorld::whole_world, r);
    got[r].assign(3, 1.0f);
    for (int step = 0; step < steps; ++step) {
      comm.barrier();
      comm.all_reduce(std::span<const float>(got[r]), std::span<float>(got[r]));
      for (float& x : got[r]) x /= static_cast<float>(n);
    }
  });
  for (int r = 0; r < n; ++r) {
    CHECK(errors[r] == "");
    CHECK(mismatch(got[r], std::vector<float>(3, 1.0f)) == "");
  }
}

TEST_CASE("rows and columns of a 2x2 world run their collectives at the same time") {
  // World rank = 2 * row + column. Column groups list their members bottom-up, so group rank
  // and world order differ.
  HostWorld world(4, kPatient);
  const int rows = world.add_groups({{0, 1}, {2, 3}});
  const int columns = world.add_groups({{2, 0}, {3, 1}});
  const int steps = 50;
  const std::size_t length = 300;
  std::vector<std::vector<float>> row_sums(4), column_gathers(4), world_sums(4);
  std::vector<std::vector<int>> ranks_in_column(4);
  const auto errors = run_ranks(world, [&](int r) {
    HostCommunicator row(world, rows, r);
    HostCommunicator column(world, columns, r);
    HostCommunicator everyone(world, HostWorld::whole_world, r);
    ranks_in_column[r] = {column.rank(), column.size(), row.rank()};
    for (int step = 0; step < steps; ++step) {
      const std::vector<float> in = values<float>(r, length, step);
      row_sums[r].resize(length);
      row.all_reduce(std::span<const float>(in), std::span<float>(row_sums[r]));
      const Counts counts = {length, length};
      column_gathers[r].resize(2 * length);
      column.all_gather(std::span<const float>(in), std::span<float>(column_gathers[r]),
                        std::span(counts));
      if (step % 10 == 0) {
        world_sums[r].resize(length);
        everyone.all_reduce(std::span<const float>(in), std::span<float>(world_sums[r]));
      }
    }
  });
  const int last = steps - 1;
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    const int row = r / 2;
    const int col = r % 2;
    CHECK(ranks_in_column[r] == std::vector<int>{1 - row, 2, col});
    CHECK(mismatch(row_sums[r], rank_order_sum<float>({values<float>(2 * row, length, last),
                                                       values<float>(2 * row + 1, length, last)},
                                                      0, length)) == "");
    std::vector<float> gathered = values<float>(2 + col, length, last);  // column rank 0 first
    const std::vector<float> lower = values<float>(col, length, last);
    gathered.insert(gathered.end(), lower.begin(), lower.end());
    CHECK(mismatch(column_gathers[r], gathered) == "");
    std::vector<std::vector<float>> all;
    for (int s = 0; s < 4; ++s) all.push_back(values<float>(s, length, 40));
    CHECK(mismatch(world_sums[r], rank_order_sum(all, 0, length)) == "");
  }
}

TEST_CASE("a failing rank aborts every collective of every group, waiting or to come") {
  // 2x2 world; rank 3 fails after a few steps while the others keep calling collectives on
  // their row, their column and the whole world. Nobody may wait for the (long) timeout.
  HostWorld world(4, kPatient);
  const int rows = world.add_groups({{0, 1}, {2, 3}});
  const int columns = world.add_groups({{0, 2}, {1, 3}});
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_ranks(world, [&](int r) {
    HostCommunicator row(world, rows, r);
    HostCommunicator column(world, columns, r);
    HostCommunicator everyone(world, HostWorld::whole_world, r);
    std::vector<float> data(64, 1.0f);
    for (int step = 0; step < 1000; ++step) {
      if (r == 3 && step == 3) throw std::runtime_error("boom at step 3");
      row.all_reduce(std::span<const float>(data), std::span<float>(data));
      column.barrier();
      everyone.all_reduce(std::span<const float>(data), std::span<float>(data));
    }
  });
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK(errors[3] == "boom at step 3");
  CHECK(world.failure() == "rank 3 failed: boom at step 3");
  for (int r = 0; r < 3; ++r) {
    CAPTURE(errors[r]);
    CHECK(contains(errors[r], "tpx: collective "));
    CHECK(contains(errors[r], " aborted: rank 3 failed: boom at step 3"));
  }
  // A collective entered after the abort throws at once.
  HostCommunicator late(world, HostWorld::whole_world, 0);
  CHECK_THROWS_WITH_AS(late.barrier(),
                       doctest::Contains(", barrier, aborted: rank 3 failed: boom at step 3"),
                       comm_error);
}

TEST_CASE("a collective that a returned rank never joined fails at once, waiting or to come") {
  // Ranks 0 and 1 call a second collective that rank 2 skips: it returns instead. However long
  // the timeout, they must fail as soon as it has returned, naming it and collective #2.
  HostWorld world(3, {.timeout = 300s});
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_ranks(world, [&](int r) {
    HostCommunicator comm(world, HostWorld::whole_world, r);
    comm.barrier();
    if (r == 2) return;
    std::vector<float> data(4, 1.0f);
    comm.all_reduce(std::span<const float>(data), std::span<float>(data));
  });
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(errors[2] == "");
  for (int r = 0; r < 2; ++r) {
    CAPTURE(errors[r]);
    CHECK(contains(errors[r],
                   "tpx: collective #2 on group {0,1,2}, all_reduce<float> of 4 "
                   "elements, can never complete: world ranks {"));
    CHECK(contains(errors[r], "} joined it but {2} returned without joining it"));
    CHECK(contains(errors[r],
                   "Is a collective inside rank-dependent control flow, e.g. `if "
                   "(rank.world_rank() == 0)`?"));
  }
  CHECK(errors[0] == errors[1]);  // one picture of the collective, for every rank in it
  // The group is unusable from then on, and says why.
  HostCommunicator late(world, HostWorld::whole_world, 0);
  CHECK_THROWS_WITH_AS(late.barrier(),
                       doctest::Contains("tpx: collective #3 on group {0,1,2}, barrier, aborted: "
                                         "collective #2 on group {0,1,2}, all_reduce<float> of "
                                         "4 elements, can never complete: "),
                       comm_error);
}

TEST_CASE("a collective entered after a member returned fails at once, listing who had come") {
  HostWorld world(3, {.timeout = 300s});
  const int pairs = world.add_groups({{0, 1}}, "mesh axis X");
  world.finish(1);
  HostCommunicator pair(world, pairs, 0);
  CHECK_THROWS_WITH_AS(pair.barrier(),
                       "tpx: collective #1 on group {0,1} (mesh axis X), barrier, can never "
                       "complete: world ranks {0} joined it but {1} returned without joining "
                       "it. Is a collective inside rank-dependent control flow, e.g. `if "
                       "(rank.world_rank() == 0)`?",
                       comm_error);
  // Rank 2 has not come to the world's collective yet: the message says so.
  HostCommunicator everyone(world, HostWorld::whole_world, 0);
  CHECK_THROWS_WITH_AS(everyone.barrier(),
                       doctest::Contains("world ranks {0} joined it but {1} returned without "
                                         "joining it ({2} had not come yet)."),
                       comm_error);
  // A rank outside the world cannot be reported.
  CHECK_THROWS_AS(world.finish(3), std::invalid_argument);
}

TEST_CASE("a rank that never arrives times the collective out, naming it") {
  // Failures are not reported to the world here: the group alone must stop every waiting rank.
  HostWorld world(3, {.timeout = 100ms});
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_ranks(
      world,
      [&](int r) {
        if (r == 2) return;  // never calls the collective
        HostCommunicator comm(world, HostWorld::whole_world, r);
        const std::vector<float> in(4, 1.0f);
        std::vector<float> out(12);
        const Counts counts = {4, 4, 4};
        comm.all_gather(std::span<const float>(in), std::span<float>(out), std::span(counts));
      },
      /*report_failures=*/false);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(elapsed >= 100ms);
  CHECK(elapsed < 1s);
  CHECK(errors[2] == "");
  for (int r = 0; r < 2; ++r) {
    CAPTURE(errors[r]);
    CHECK(errors[r] ==
          "tpx: collective #1 on group {0,1,2}, all_gather<float> of 12 elements, timed out "
          "after 100 ms: world ranks {2} never arrived");
  }
  CHECK(world.failure() == std::nullopt);
  // Rank 2 arriving late finds the group unusable instead of waiting.
  HostCommunicator late(world, HostWorld::whole_world, 2);
  CHECK_THROWS_WITH_AS(late.barrier(),
                       "tpx: collective #1 on group {0,1,2}, barrier, aborted: collective #1 on "
                       "group {0,1,2}, all_gather<float> of 12 elements, timed out after 100 ms: "
                       "world ranks {2} never arrived",
                       comm_error);
}

TEST_CASE("mismatched collectives throw on every rank, naming both calls and their number") {
  struct Case {
    std::function<void(HostCommunicator&)> rank0, rank1;
    std::string expected;
    int sequence = 1;  // the mismatched collective's number on the group
  };
  const std::vector<float> four(4, 1.0f);
  const auto all_reduce = [&](std::size_t n) {
    return [n, &four](HostCommunicator& c) {
      std::vector<float> out(n);
      c.all_reduce(std::span<const float>(four.data(), n), std::span<float>(out));
    };
  };
  const auto all_gather = [&](Counts counts) {
    return [counts, &four](HostCommunicator& c) {
      std::vector<float> out(counts[0] + counts[1]);
      c.all_gather(std::span<const float>(four.data(), counts[c.rank()]), std::span<float>(out),
                   std::span(counts));
    };
  };
  const auto all_reduce_max = [&](std::size_t n) {
    return [n, &four](HostCommunicator& c) {
      std::vector<float> out(n);
      c.all_reduce(std::span<const float>(four.data(), n), std::span<float>(out),
                   tpx::reduction::max);
    };
  };
  const auto all_reduce_bf16 = [](HostCommunicator& c) {
    std::vector<bf16> data(4, bf16(1.0f));
    c.all_reduce(std::span<const bf16>(data), std::span<bf16>(data));
  };
  // Two ranks that disagree are tied: the message lists both calls in group-rank order.
  const std::string tied = "the calls are tied, none made by more ranks than the others: ";
  const std::vector<Case> cases = {
      {all_gather({2, 2}), all_reduce(4),
       tied + "world rank 0 called all_gather<float> of 4 elements, world rank 1 called "
              "all_reduce<float> of 4 elements"},
      {all_reduce(4), all_reduce(3),
       tied + "world rank 0 called all_reduce<float> of 4 elements, world rank 1 called "
              "all_reduce<float> of 3 elements"},
      {all_reduce(4), all_reduce_bf16,
       tied + "world rank 0 called all_reduce<float> of 4 elements, world rank 1 called "
              "all_reduce<bf16> of 4 elements"},
      {all_reduce(4), all_reduce_max(4),
       tied + "world rank 0 called all_reduce<float> of 4 elements, world rank 1 called "
              "all_reduce(max)<float> of 4 elements"},
      {all_reduce_max(4), all_reduce(4),
       tied + "world rank 0 called all_reduce(max)<float> of 4 elements, world rank 1 called "
              "all_reduce<float> of 4 elements"},
      {all_gather({1, 2}), all_gather({2, 1}),
       tied + "world rank 0 called all_gather<float> of 3 elements, world rank 1 called "
              "all_gather<float> of 3 elements with different per-rank counts"},
      {[](HostCommunicator& c) { c.barrier(); }, all_reduce(2),
       tied + "world rank 0 called barrier, world rank 1 called all_reduce<float> of 2 elements"},
      {[&](HostCommunicator& c) {
         all_reduce(4)(c);
         all_reduce(4)(c);
       },
       [&](HostCommunicator& c) {
         all_reduce(4)(c);
         all_gather({2, 2})(c);
       },
       tied + "world rank 0 called all_reduce<float> of 4 elements, world rank 1 called "
              "all_gather<float> of 4 elements",
       2},
  };
  for (const Case& c : cases) {
    CAPTURE(c.expected);
    HostWorld world(2, kPatient);
    const auto errors = run_ranks(world, [&](int r) {
      HostCommunicator comm(world, HostWorld::whole_world, r);
      (r == 0 ? c.rank0 : c.rank1)(comm);
    });
    for (int r = 0; r < 2; ++r) {
      CAPTURE(errors[r]);
      CHECK(errors[r] == "tpx: mismatched collectives on group {0,1} at collective #" +
                             std::to_string(c.sequence) + ": " + c.expected);
    }
  }
}

TEST_CASE("a mismatch names the ranks that deviated from the call most ranks made") {
  // A group of 4 listed out of world order, {3,1,0,2}: the ranks are named in world numbering,
  // each list in group-rank order. Each case says what every world rank calls (a, b or c) and
  // the whole message every rank must throw.
  const std::vector<float> twelve(12, 1.0f);
  const Counts threes = {3, 3, 3, 3};
  const std::function<void(HostCommunicator&)> gather = [&](HostCommunicator& c) {
    std::vector<float> out(12);
    c.all_gather(std::span<const float>(twelve.data(), 3), std::span<float>(out),
                 std::span(threes));
  };
  const std::function<void(HostCommunicator&)> scatter = [&](HostCommunicator& c) {
    std::vector<float> out(3);
    c.reduce_scatter(std::span<const float>(twelve), std::span<float>(out), std::span(threes));
  };
  const std::function<void(HostCommunicator&)> barrier = [](HostCommunicator& c) { c.barrier(); };
  struct Case {
    std::vector<const std::function<void(HostCommunicator&)>*> call_of_world_rank;
    std::string expected;
  };
  const std::string prefix =
      "tpx: mismatched collectives on group {3,1,0,2} (mesh axis X) at collective #1: ";
  const std::vector<Case> cases = {
      {{&scatter, &scatter, &gather, &scatter},
       "world rank 2 called all_gather<float> of 12 elements where ranks {3,1,0} called "
       "reduce_scatter<float> of 12 elements"},
      {{&gather, &scatter, &scatter, &scatter},
       "world rank 0 called all_gather<float> of 12 elements where ranks {3,1,2} called "
       "reduce_scatter<float> of 12 elements"},
      {{&scatter, &scatter, &scatter, &gather},
       "world rank 3 called all_gather<float> of 12 elements where ranks {1,0,2} called "
       "reduce_scatter<float> of 12 elements"},
      {{&barrier, &gather, &scatter, &scatter},
       "world rank 1 called all_gather<float> of 12 elements and world rank 0 called barrier "
       "where ranks {3,2} called reduce_scatter<float> of 12 elements"},
      {{&barrier, &gather, &barrier, &gather},
       "the calls are tied, none made by more ranks than the others: world ranks {3,1} called "
       "all_gather<float> of 12 elements, world ranks {0,2} called barrier"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.expected);
    HostWorld world(4, kPatient);
    const int set = world.add_groups({{3, 1, 0, 2}}, "mesh axis X");
    const auto errors = run_ranks(world, [&](int r) {
      HostCommunicator comm(world, set, r);
      (*c.call_of_world_rank[r])(comm);
    });
    for (int r = 0; r < 4; ++r) {
      CAPTURE(r);
      CHECK(errors[r] == prefix + c.expected);
    }
  }
}

TEST_CASE("sizes that disagree with the counts are rejected before the group meets") {
  HostWorld world(1, kPatient);
  HostCommunicator comm(world, HostWorld::whole_world, 0);
  const std::vector<float> in(3);
  std::vector<float> out(4);
  const Counts four = {4};
  CHECK_THROWS_WITH_AS(
      comm.all_gather(std::span<const float>(in), std::span<float>(out), std::span(four)),
      "tpx: all_gather on group {0}, rank 0: in.size() is 3, expected 4", std::invalid_argument);
  const Counts two = {2, 2};
  CHECK_THROWS_AS(
      comm.reduce_scatter(std::span<const float>(out), std::span<float>(out), std::span(two)),
      std::invalid_argument);
  CHECK_THROWS_AS(comm.all_reduce(std::span<const float>(in), std::span<float>(out)),
                  std::invalid_argument);
  CHECK_THROWS_AS(comm.broadcast(std::span<const float>(in), std::span<float>(out), 1),
                  std::invalid_argument);
  // The group is still usable: nothing met.
  comm.all_reduce(std::span<const float>(out), std::span<float>(out));
}

TEST_CASE("groups must be disjoint sets of world ranks, and a rank finds only its own") {
  HostWorld world(4, kPatient);
  CHECK_THROWS_AS(world.add_groups({{0, 1}, {1, 2}}), std::invalid_argument);
  CHECK_THROWS_AS(world.add_groups({{0, 4}}), std::invalid_argument);
  CHECK_THROWS_AS(world.add_groups({{}}), std::invalid_argument);
  const int pair = world.add_groups({{3, 1}});
  HostCommunicator three(world, pair, 3);
  CHECK(three.rank() == 0);
  CHECK(three.size() == 2);
  CHECK(std::vector<int>(three.world_ranks().begin(), three.world_ranks().end()) ==
        std::vector<int>{3, 1});
  CHECK_THROWS_AS(HostCommunicator(world, pair, 0), std::invalid_argument);
  CHECK_THROWS_AS(HostCommunicator(world, 7, 0), std::invalid_argument);
}

// --- The typed all_reduce_max<X> (ops/collectives.hpp) on a host mesh ---

namespace {
TPX_MESH_AXES(MX, MY);
TPX_DIMS(Row, Vocab);
}  // namespace

TEST_CASE("all_reduce_max<Y> of row maxima over vocabulary blocks gives the rows' maxima") {
  // Logits [Row_X, Vocab_Y] on a 2x3 mesh; each rank's maxima over its block of the vocabulary
  // are [Row_X]{U_Y}, and all_reduce_max<Y> makes them [Row_X], equal to the maxima of the
  // unsharded rows. A vocabulary of 2 leaves one rank of each row group an empty block (its
  // partial maxima are -inf). A NaN in one rank's partial maxima reaches every rank of its group.
  for (const std::int64_t vocab : {10, 2}) {
    CAPTURE(vocab);
    std::atomic<int> wrong{0};
    tpx::spmd(tpx::host, tpx::Mesh<MX, MY>{2, 3}, [&](auto& rank) {
      const std::int64_t rows = 5;
      const auto logits = tpx::randn<float, Row<MX>, Vocab<MY>>(rank, {Row(rows), Vocab(vocab)}, 7);
      const auto whole = tpx::randn<float, Row<>, Vocab<>>(rank, {Row(rows), Vocab(vocab)}, 7);
      tpx::Tensor<float, Row<MX>, tpx::Unreduced<MY>> partial(rank, {Row(rows)});
      const std::int64_t local_rows = logits.local_extent(0), local_vocab = logits.local_extent(1);
      for (std::int64_t b = 0; b < local_rows; ++b) {
        float m = -kInf;
        for (std::int64_t v = 0; v < local_vocab; ++v)
          m = std::max(m, logits.local()[b * local_vocab + v]);
        partial.local()[b] = m;
      }
      const bool poisoned = rank.template coord<MY>() == 1 && local_rows > 0;
      if (poisoned) partial.local()[0] = kNaN;

      const auto maxima = tpx::all_reduce_max<MY>(partial);
      static_assert(std::is_same_v<decltype(maxima), const tpx::Tensor<float, Row<MX>>>,
                    "all_reduce_max<Y>: [Row_X]{U_Y} -> [Row_X]");
      if (maxima.local_extent(0) != local_rows) ++wrong;
      for (std::int64_t b = 0; b < local_rows; ++b) {
        const std::int64_t row = maxima.local_offset(0) + b;
        float want = -kInf;
        for (std::int64_t v = 0; v < vocab; ++v)
          want = std::max(want, whole.local()[row * vocab + v]);
        const float got = maxima.local()[b];
        // Row 0 of each row group is poisoned by its Y=1 rank (which always holds rows).
        if (b == 0 ? !std::isnan(got) : got != want) ++wrong;
      }
    });
    CHECK(wrong.load() == 0);
  }
}

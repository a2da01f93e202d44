// tpx-bench-collectives: the nccl-tests sweep (all_gather, reduce_scatter, all_reduce,
// all_to_all, broadcast) on tpx's communicators, with a single-thread memcpy beside each size.
//
//   tpx-bench-collectives -g 4 -b 1K -e 256M -f 2 -n 20 -w 5 --json collectives.json
//
// The ranks are the threads of tpx::spmd(tpx::host, Mesh<R>{g}) and each collective runs on
// the communicator of that mesh axis, exactly as a typed all_gather<R> would reach it. Started by
// mpirun (tpx::started_by_mpi(); CMake builds it with MPI, TPX_BENCH_MPI, when it finds MPI),
// the ranks are the processes of `mpirun -np g` instead, through spmd(tpx::mpi, ...): the same
// sweep on MPI's collectives, for comparing the two backends on one machine (bench/README.md);
// the job's size replaces -g.
//
// Sizes, counts and bandwidths follow NVIDIA/nccl-tests doc/PERFORMANCE.md: S is the size of the
// whole array (for all_gather the gathered output, for reduce_scatter the input, for
// all_to_all one rank's send buffer), algbw = S / t, busbw = algbw * factor with factor
// 2(n-1)/n for all_reduce, (n-1)/n for reduce_scatter, all_gather and all_to_all, 1 for
// broadcast. Each size runs out of place and in place (nccl-tests' layouts: all_gather's input
// is this rank's block of the output, reduce_scatter's output is this rank's block of the
// input; all_to_all has no in-place form and prints N/A), each timed as the mean of -n
// back-to-back calls after -w warm-up calls. Then the inputs are refilled from seeded integer
// values (sums of them are exact in fp32 in any order), the collective runs once more and
// #wrong counts the output elements, over all ranks, that differ from the reference computed
// from the same seeds.
//
// memcpy is one thread copying S bytes between two buffers (std::memcpy, the mean of at least
// -n calls after -w), and ratio = out-of-place busbw / memcpy. "memcpy x ranks" is every rank
// copying S bytes at once, the total GB/s: what the machine's memory gives these threads
// together, the bound the collectives share. bench/README.md says why these are the comparisons
// and what they mean on a machine with fewer cores than ranks. The largest size is
// lowered to fit --max-memory (every rank holds a send and a receive buffer of S bytes).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <tpx/launch/started_by_mpi.hpp>
#include <tpx/tpx.hpp>
#include <vector>
#ifdef TPX_BENCH_MPI
#include <mpi.h>

#include <tpx/spmd/spmd_mpi.hpp>
#endif

#include "support/collective_table.hpp"
#include "support/page_vector.hpp"
#include "support/report.hpp"
#include "support/sizes.hpp"

namespace {

TPX_MESH_AXES(R);

using tpx::bench::clock;
using tpx::bench::seconds_since;

using tpx::bench::collective;
using tpx::bench::collectives;
using tpx::bench::layout;
using tpx::bench::value_at;


struct options {
  int ranks = 4;
  std::int64_t min_bytes = 1 << 10, max_bytes = 256 << 20;
  double factor = 2;
  int iters = 20, warmup = 5;
  bool check = true;
  std::int64_t max_memory = 0;
  std::vector<std::string> ops;
  std::string json;
};

// One timed variant (out of place or in place) of one collective at one size.
struct result {
  double seconds = 0;
  std::int64_t wrong = 0;
};

// Times `iters` calls of one thing after `warmup` calls: the mean, in seconds.
template <class Fn>
double mean_time(int warmup, std::int64_t iters, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  const auto start = clock::now();
  for (std::int64_t i = 0; i < iters; ++i) fn();
  return seconds_since(start) / static_cast<double>(iters);
}

// How many memcpy calls of `bytes` to time: at least -n, and enough to copy 256 MiB, so that
// small copies are timed over many calls rather than a few clock reads.
std::int64_t memcpy_calls(std::int64_t bytes, const options& o) {
  return std::max<std::int64_t>(o.iters, (std::int64_t{256} << 20) / bytes);
}

// Single-thread memcpy of each size, seconds per call.
std::vector<double> memcpy_seconds(const std::vector<std::int64_t>& sizes, const options& o) {
  const std::int64_t largest = *std::ranges::max_element(sizes);
  tpx::bench::page_vector<char> from(static_cast<std::size_t>(largest), 1), to(from.size(), 2);
  std::vector<double> seconds;
  for (std::int64_t bytes : sizes)
    seconds.push_back(mean_time(o.warmup, memcpy_calls(bytes, o), [&] {
      std::memcpy(to.data(), from.data(), static_cast<std::size_t>(bytes));
      asm volatile("" : : "r"(to.data()) : "memory");  // the copy must happen every time
    }));
  return seconds;
}

void print_header(const collective& c, int ranks) {
  std::printf("#\n# %s, %d ranks\n#\n", c.name, ranks);
  std::printf("# %70s %35s\n", "out-of-place", "in-place");
  std::printf("# %10s %12s %6s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s %8s %6s %8s\n", "size",
              "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
              "busbw", "#wrong", "memcpy", "ratio", "memcpy");
  std::printf("# %10s %12s %6s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s %8s %6s %8s\n", "(B)",
              "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
              "", "(GB/s)", "", "x ranks");
}

// Runs every collective of o.ops at every size on the launcher's ranks; rank 0 prints and
// collects rows.
template <class Launcher>
void sweep(Launcher launcher, const options& o, const std::vector<std::int64_t>& sizes,
           const std::vector<double>& memcpy_s, nlohmann::json& rows) {
  const std::size_t buffer = static_cast<std::size_t>(sizes.back()) / sizeof(float);
  tpx::spmd(launcher, tpx::Mesh<R>{o.ranks}, [&](auto& rank) {
    tpx::any_communicator& comm = rank.template group<R>();
    const int n = comm.size(), me = comm.rank();
    tpx::bench::page_vector<float> send(buffer), recv(buffer);  // zeroed: pages touched now

    // Seconds per call of fn when every rank calls it at once: -w calls, then the mean of
    // `iters` calls between two barriers.
    const auto time_on_ranks = [&](std::int64_t iters, auto&& fn) {
      for (int i = 0; i < o.warmup; ++i) fn();
      comm.barrier();
      const auto start = clock::now();
      for (std::int64_t i = 0; i < iters; ++i) fn();
      comm.barrier();
      return seconds_since(start) / static_cast<double>(iters);
    };

    // Every rank copying S bytes at once (as many calls as the single-thread memcpy), the
    // machine's copy throughput with these threads.
    std::vector<double> all_ranks_memcpy_gbps;
    for (std::int64_t bytes : sizes) {
      const double seconds = time_on_ranks(memcpy_calls(bytes, o), [&] {
        std::memcpy(recv.data(), send.data(), static_cast<std::size_t>(bytes));
        asm volatile("" : : "r"(recv.data()) : "memory");
      });
      all_ranks_memcpy_gbps.push_back(n * static_cast<double>(bytes) / 1e9 / seconds);
    }

    // Fills the input, times the collective, then checks one call on fresh input.
    const auto measure = [&](const collective& c, const layout& l, bool in_place) {
      float* in = in_place ? recv.data() + l.in_place_input : send.data();
      float* out = recv.data() + (in_place ? l.in_place_output : 0);
      const auto fill = [&] {
        for (std::size_t i = 0; i < l.send; ++i) in[i] = value_at(me, i);
      };
      fill();
      result r{time_on_ranks(o.iters, [&] { c.run(comm, l, in, out); }), 0};
      if (!o.check) return r;
      fill();
      c.run(comm, l, in, out);
      // Counts summed over the ranks in float: exact up to 2^24 wrong elements per size.
      float wrong = 0, all_wrong = 0;
      for (std::size_t j = 0; j < l.recv; ++j) wrong += out[j] != c.expected(l, n, me, j);
      comm.all_reduce(std::span<const float>(&wrong, 1), std::span(&all_wrong, 1));
      r.wrong = static_cast<std::int64_t>(all_wrong);
      return r;
    };

    for (const collective& c : collectives) {
      if (std::ranges::find(o.ops, c.name) == o.ops.end()) continue;
      if (me == 0) print_header(c, n);
      double busbw_sum = 0;
      int rows_printed = 0;
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        const layout l = c.shape(sizes[s], n, me);
        if (l.count == 0) continue;
        const std::int64_t bytes =
            static_cast<std::int64_t>(std::max(l.send, l.recv) * sizeof(float));
        const result oop = measure(c, l, false);
        const result ip = c.has_in_place ? measure(c, l, true) : result{};
        if (me != 0) continue;
        const auto algbw = [&](const result& r) { return bytes / r.seconds / 1e9; };
        const double busbw = algbw(oop) * c.bus_factor(n);
        const double memcpy_gbps = sizes[s] / memcpy_s[s] / 1e9;
        std::printf("  %10lld %12zu %6s %6s %6d %9.1f %7.2f %7.2f %6lld ",
                    static_cast<long long>(bytes), l.count, "float", c.redop, c.root,
                    oop.seconds * 1e6, algbw(oop), busbw, static_cast<long long>(oop.wrong));
        if (c.has_in_place)
          std::printf("%9.1f %7.2f %7.2f %6lld ", ip.seconds * 1e6, algbw(ip),
                      algbw(ip) * c.bus_factor(n), static_cast<long long>(ip.wrong));
        else
          std::printf("%9s %7s %7s %6s ", "N/A", "N/A", "N/A", "N/A");
        std::printf("%8.2f %6.3f %8.2f\n", memcpy_gbps, busbw / memcpy_gbps,
                    all_ranks_memcpy_gbps[s]);
        std::fflush(stdout);
        busbw_sum += busbw;
        ++rows_printed;
        nlohmann::json row = {{"op", c.name},
                              {"ranks", n},
                              {"size", bytes},
                              {"count", l.count},
                              {"type", "float"},
                              {"redop", c.redop},
                              {"root", c.root},
                              {"oop_time_us", oop.seconds * 1e6},
                              {"oop_algbw", algbw(oop)},
                              {"oop_busbw", busbw},
                              {"oop_wrong", oop.wrong},
                              {"memcpy_gbps", memcpy_gbps},
                              {"ratio", busbw / memcpy_gbps},
                              {"all_ranks_memcpy_gbps", all_ranks_memcpy_gbps[s]}};
        if (c.has_in_place) {
          row["ip_time_us"] = ip.seconds * 1e6;
          row["ip_algbw"] = algbw(ip);
          row["ip_busbw"] = algbw(ip) * c.bus_factor(n);
          row["ip_wrong"] = ip.wrong;
        }
        rows.push_back(std::move(row));
      }
      if (me == 0 && rows_printed > 0)
        std::printf("# Avg bus bandwidth (out of place) : %.3f GB/s\n", busbw_sum / rows_printed);
    }
  });
}

}  // namespace

// The bench on launcher's ranks. world_size is the MPI job's size (it replaces -g), or 0 for the
// threads of this process; only world rank 0 writes --json.
template <class Launcher>
int run_bench(int argc, char** argv, Launcher launcher, const char* ranks_are, int world_rank,
              int world_size) {
  options o;
  for (const collective& c : collectives) o.ops.emplace_back(c.name);
  std::string min_text = "1K", max_text = "256M", memory_text;
  CLI::App app{"tpx-bench-collectives: nccl-tests' sweep of tpx's host collectives"};
  app.add_option("-g,--ranks", o.ranks,
                 "ranks: threads of this process (under mpirun: the processes)")
      ->check(CLI::Range(1, 1024));
  app.add_option("-b,--minbytes", min_text, "smallest size S (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", max_text, "largest size S (lowered to fit --max-memory)");
  app.add_option("-f,--stepfactor", o.factor, "multiply S by this each step")
      ->check(CLI::Range(1.0001, 1e9));
  app.add_option("-n,--iters", o.iters, "timed calls per size")->check(CLI::Range(1, 1 << 30));
  app.add_option("-w,--warmup_iters", o.warmup, "untimed calls first")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("-c,--check", o.check, "check every result (1) or not (0)");
  app.add_option("-o,--op", o.ops, "collectives to run (default: all)")
      ->check(
          CLI::IsMember({"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"}));
  app.add_option("--max-memory", memory_text,
                 "bytes all ranks' buffers may take (default: half of MemAvailable)");
  app.add_option("--json", o.json, "write every row to this file as JSON");
  CLI11_PARSE(app, argc, argv);
  if (world_size > 0) o.ranks = world_size;
  if (world_rank != 0) o.json.clear();

  try {
    o.min_bytes = tpx::bench::parse_bytes(min_text);
    o.max_bytes = tpx::bench::parse_bytes(max_text);
    o.max_memory = memory_text.empty() ? tpx::bench::available_memory() / 2
                                       : tpx::bench::parse_bytes(memory_text);
    std::vector<std::int64_t> sizes = tpx::bench::size_sweep(o.min_bytes, o.max_bytes, o.factor);
    // Every rank holds a send and a receive buffer as large as the largest S.
    const auto fits = [&](std::int64_t s) { return 2 * s * o.ranks <= o.max_memory; };
    while (!sizes.empty() && !fits(sizes.back())) sizes.pop_back();
    if (sizes.empty()) throw std::invalid_argument("no size fits in --max-memory " + memory_text);
    std::printf(
        "# tpx-bench-collectives: %d ranks (%s) on %d cores (load average %.2f), float, -n %d "
        "-w %d -c %d\n",
        o.ranks, ranks_are, tpx::bench::usable_cores(), tpx::bench::load_average(), o.iters,
        o.warmup, o.check ? 1 : 0);
    if (sizes.back() < o.max_bytes)
      std::printf("# -e lowered to %s: %d ranks x 2 buffers must fit --max-memory %s\n",
                  tpx::bench::format_bytes(sizes.back()).c_str(), o.ranks,
                  tpx::bench::format_bytes(o.max_memory).c_str());
    const std::vector<double> memcpy_s = memcpy_seconds(sizes, o);
    nlohmann::json rows = nlohmann::json::array();
    sweep(launcher, o, sizes, memcpy_s, rows);
    std::int64_t wrong = 0;
    for (const auto& row : rows)
      wrong += row["oop_wrong"].get<std::int64_t>() + row.value("ip_wrong", std::int64_t{0});
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong),
                wrong == 0 ? "OK" : "FAILED");
    if (!o.json.empty())
      tpx::bench::write_json(
          o.json, "collectives", tpx::bench::command_line(argc, argv),
          {{"ranks", o.ranks}, {"iters", o.iters}, {"warmup", o.warmup}, {"check", o.check}},
          std::move(rows));
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpx-bench-collectives: %s\n", e.what());
    return 2;
  }
}

// Threads, or the processes of an MPI job when an MPI launcher started the bench (see the top).
int main(int argc, char** argv) {
  if (const char* variable = tpx::mpi_launcher_variable()) {
#ifdef TPX_BENCH_MPI
    (void)variable;
    MPI_Init(&argc, &argv);
    struct finalize_at_exit {
      ~finalize_at_exit() { MPI_Finalize(); }
    } finalize;
    int world_rank = 0, world_size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (world_rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 2;  // rank 0 reports
    return run_bench(argc, argv, tpx::mpi, "processes, MPI communicator", world_rank, world_size);
#else
    std::fprintf(stderr,
                 "tpx-bench-collectives: started by an MPI launcher (%s is set), but built "
                 "without MPI (TPX_MPI=OFF); start it without mpirun (-g threads)\n",
                 variable);
    return 2;
#endif
  }
  return run_bench(argc, argv, tpx::host, "threads, host communicator", 0, 0);
}

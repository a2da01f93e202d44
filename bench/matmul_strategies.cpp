// tpx-bench-matmul-strategies: what each sharding costs on the host backend, split into compute
// and communication, against the unsharded GEMM and against the cost model's prediction.
//
//   tpx-bench-matmul-strategies -g 2,4 --batch 1024,4096 -d 512 -f 2048 --json strategies.json
//
// For each rank count of -g, two families of rows, each run on the ranks of
// tpx::spmd(tpx::host, Mesh<X, Y>):
//   case1..case4  the notes' four sharded matmuls, [I, J] x [J, K] with the shardings of
//                 seed 001 (case 3 reduces its partial sum with AllReduce); case 1 on every
//                 2-D mesh x * y = g, the others on g x 1
//   dp, fsdp, tp, fsdp_tp  the notes' MLP layer under each layout (tpx::cost::mlp's types),
//                 two rows each, "pass" forward and backward: dp and fsdp on g x 1, tp on 1 x g,
//                 fsdp_tp on every 2-D mesh, for each --batch
// For each row the program runs what tpx::matmul would run, in its parts: the collectives of
// the plan (matmul_plan_t<L, R>::lhs_steps / rhs_steps, then the reshard of the product), each
// through the typed collectives, timed as communication; and tpx::matmul on the operands the
// collectives produced (its plan then has no steps), timed as compute. The layer's pass is
// tpx::cost::mlp::run_step (cost/mlp_step.hpp), the step the cost model prices, its backward
// written as tests/unit/fsdp_tp_mlp_test.cpp writes it, with loss = sum(Out^2) / 2: the adjoints
// of the forward's collectives (apply<adjoint_t<Step>>, last step first), the weights gathered
// again, the four local GEMMs contract<B>, contract<D>, contract<B>, contract<F>, and for DP the
// AllReduce that brings each weight's gradient to the weight's type. Each part is timed on
// rank 0 between two barriers of the whole mesh, so it lasts until the slowest rank is done;
// the median of -n runs after -w is reported. "unsharded" is the same product, or pass of the
// layer, on one rank alone.
//
// The prediction is tpx::cost's (cost/matmul.hpp, cost/mlp.hpp) for a profile of this machine
// that the program measures first, for each rank count, with all ranks busy at once as they
// are in every row: per-rank sgemm FLOP/s (1024^3), per-rank memcpy bandwidth (16 MiB) and the
// bus bandwidth of an all_gather of 16 MiB over all ranks, medians of 5. Each JSON row carries
// the profile it was predicted with, and settings.profiles holds each as a hardware profile
// (FLOP/s, memory and link bytes/s, memory per rank) that `tpx-plan --profile FILE` reads as
// "this machine". bench/README.md compares measurement and prediction. Beside the predicted
// bytes each row prints the link bytes rank 0's communicators counted in one timed run (the
// nccl-tests bus bytes of its collectives, comm/collective_traffic.hpp), so that a row whose
// model moves other bytes than the program shows it.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <tpx/cost/mlp.hpp>
#include <tpx/cost/mlp_step.hpp>
#include <tpx/tpx.hpp>
#include <utility>
#include <vector>

#include "support/page_vector.hpp"
#include "support/report.hpp"

namespace {

using tpx::bench::clock;
using tpx::bench::samples;
using tpx::bench::seconds_since;
using tpx::cost::mlp::B;
using tpx::cost::mlp::D;
using tpx::cost::mlp::F;
using tpx::cost::mlp::X;
using tpx::cost::mlp::Y;
using mesh_t = tpx::cost::mlp::mesh;
using cluster_t = tpx::cost::cluster<mesh_t>;
namespace mlp = tpx::cost::mlp;
TPX_DIMS(I, J, K);

constexpr double fp32 = 4;

struct options {
  std::vector<int> ranks = {4};
  std::vector<std::int64_t> batches = {1024, 4096};
  std::int64_t d_model = 512, d_ff = 2048, matrix = 1024;
  int iters = 3, warmup = 1;
  std::string json;
};

// A tensor of type Tn with the given global extents and seeded normal values.
template <class Tn>
struct random_tensor;
template <class T, class... Spec>
struct random_tensor<tpx::Tensor<T, Spec...>> {
  template <class R>
  static auto make(const R& rank, std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    using Tn = tpx::Tensor<T, Spec...>;
    return tpx::randn<T, Spec...>(rank, typename Tn::shape_type(tpx::index_array<2>{rows, cols}),
                                  seed);
  }
};

// Times of one run's parts, in seconds, on rank 0.
struct parts {
  double compute = 0, comm = 0;
};

// The communication and compute of one product l * r of the plan, reduced to Out when Out is
// not void, timed by `timed` (barrier, fn, barrier). Returns the result.
template <class Out, class L, class R, class Timed>
auto product(const L& l, const R& r, parts& p, Timed&& timed) {
  using plan = tpx::matmul_plan_t<L, R>;
  const auto communicate = [&](auto&& fn) { return timed(p.comm, fn); };
  const auto& lhs = tpx::cost::after_steps<typename plan::lhs_steps>(l, communicate);
  const auto& rhs = tpx::cost::after_steps<typename plan::rhs_steps>(r, communicate);
  auto c = timed(p.compute, [&] { return tpx::matmul(lhs, rhs); });
  if constexpr (std::is_void_v<Out>) {
    return c;
  } else {
    using steps = typename tpx::reshard_traits<decltype(c), Out>::steps;
    return Out(tpx::cost::after_steps<steps>(c, communicate));
  }
}

// What the rows need to know of this machine, measured with every rank busy at once.
struct calibration {
  double gemm_flops = 0, copy_bw = 0, busbw = 0;
  // Memory traffic is reads plus writes: a memcpy of S bytes moves 2 S.
  tpx::cost::hardware_profile profile() const {
    return {"this machine (host backend, measured)",  gemm_flops, 2 * copy_bw, busbw, 0,
            "tpx-bench-matmul-strategies calibration"};
  }
};

// The profile measured for `ranks` ranks as tpx-plan --profile reads it (settings.profiles):
// hardware_profile's fields per rank in its units, the machine's memory shared by the ranks.
nlohmann::json profile_json(const calibration& cal, int ranks) {
  const tpx::cost::hardware_profile hw = cal.profile();
  const double memory = static_cast<double>(tpx::bench::machine()["memory_bytes"]) / ranks;
  return {{"ranks", ranks},
          {"name", std::string(hw.name) + ", " + std::to_string(ranks) + " ranks"},
          {"flops", hw.flops},
          {"memory_bw", hw.memory_bw},
          {"link_bw", hw.link_bw},
          {"memory", memory},
          {"source", std::string(hw.source)}};
}

struct row {
  std::string kind, name, mesh, pass = "forward";
  std::int64_t m = 0, k = 0, n = 0;  // I, J, K or B, D, F
  samples compute, comm, unsharded;
  tpx::cost::op_estimate predicted;
  double counted_link_bytes = 0;  // rank 0's in one timed run, as its communicators counted it
};

// What the rank's collectives have put on its link so far, over every set of mesh axes.
double link_bytes_so_far(const tpx::rank_context& rank) {
  return tpx::link_bytes(rank.traffic_by_axis_names());
}

std::string mesh_name(int x, int y) { return "X=" + std::to_string(x) + ",Y=" + std::to_string(y); }

void print_header() {
  std::printf(
      "# %-8s %-4s %-7s %6s %6s %6s %10s %10s %10s %10s %10s %10s %7s %9s %9s %10s\n", "name",
      "pass", "mesh", "I|B", "J|D", "K|F", "measured", "compute", "comm", "predicted", "p.comm",
      "p.total", "meas/", "link MiB", "link MiB", "unsharded");
  std::printf(
      "# %-8s %-4s %-7s %6s %6s %6s %10s %10s %10s %10s %10s %10s %7s %9s %9s %10s\n", "", "", "",
      "", "", "", "(ms)", "(ms)", "(ms)", "compute", "(ms)", "(ms)", "pred", "predicted",
      "counted", "(ms)");
}

void print_row(const row& r) {
  const double c = r.compute.median(), m = r.comm.median(), p = r.predicted.seconds();
  std::printf(
      "  %-8s %-4s %-7s %6lld %6lld %6lld %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %7.2f %9.2f "
      "%9.2f %10.3f\n",
      r.name.c_str(), r.pass.substr(0, 3).c_str(), r.mesh.c_str(), static_cast<long long>(r.m),
      static_cast<long long>(r.k), static_cast<long long>(r.n), (c + m) * 1e3, c * 1e3, m * 1e3,
      r.predicted.compute_seconds() * 1e3, r.predicted.comm.seconds * 1e3, p * 1e3, (c + m) / p,
      r.predicted.comm.bus_bytes / (1 << 20), r.counted_link_bytes / (1 << 20),
      r.unsharded.median() * 1e3);
  std::fflush(stdout);
}

nlohmann::json to_json(const row& r) {
  const double c = r.compute.median(), m = r.comm.median();
  return {{"kind", r.kind},
          {"name", r.name},
          {"pass", r.pass},
          {"mesh", r.mesh},
          {"m", r.m},
          {"k", r.k},
          {"n", r.n},
          {"measured_ms", (c + m) * 1e3},
          {"measured_compute_ms", c * 1e3},
          {"measured_comm_ms", m * 1e3},
          {"predicted_ms", r.predicted.seconds() * 1e3},
          {"predicted_compute_ms", r.predicted.compute_seconds() * 1e3},
          {"predicted_comm_ms", r.predicted.comm.seconds * 1e3},
          {"measured_over_predicted", (c + m) / r.predicted.seconds()},
          {"comm_bus_mib_per_rank", r.predicted.comm.bus_bytes / (1 << 20)},
          {"comm_bus_mib_per_rank_counted", r.counted_link_bytes / (1 << 20)},
          {"collectives", r.predicted.comm.collectives},
          {"unsharded_ms", r.unsharded.median() * 1e3}};
}

// Runs the benchmark body on a mesh of x * y ranks and returns rank 0's rows.
template <class Body>
void on_mesh(int x, int y, Body&& body) {
  tpx::spmd(tpx::host, mesh_t{x, y}, [&](auto& rank) {
    tpx::any_communicator& world = rank.template group<X, Y>();
    const auto timed = [&](double& total, auto&& fn) {
      world.barrier();
      const auto start = clock::now();
      auto result = fn();
      world.barrier();
      total += seconds_since(start);
      return result;
    };
    body(rank, world, timed);
  });
}

// Medians of 5 runs with every rank busy: a 1024^3 sgemm, a 16 MiB memcpy and an all_gather of
// 16 MiB over all ranks.
calibration calibrate(int ranks) {
  calibration cal;
  on_mesh(ranks, 1, [&](auto& rank, tpx::any_communicator& world, auto&& timed) {
    const std::int64_t s = 1024;
    std::vector<float> a(s * s, 1.0f), b(s * s, 1.0f), c(s * s);
    samples gemm, copy, gather;
    const std::size_t bytes = 16 << 20;
    tpx::bench::page_vector<float> from(bytes / 4, 1.0f), to(bytes / 4), all(bytes / 4);
    const std::vector<std::size_t> counts(ranks, bytes / 4 / ranks);
    for (int i = 0; i < 5; ++i) {
      double t = 0;
      timed(t, [&] {
        tpx::kernels::gemm(false, false, s, s, s, 1.0f, a.data(), s, b.data(), s, 0.0f, c.data(),
                           s);
        return 0;
      });
      gemm.seconds.push_back(std::exchange(t, 0));
      timed(t, [&] {
        std::memcpy(to.data(), from.data(), bytes);
        return 0;
      });
      copy.seconds.push_back(std::exchange(t, 0));
      timed(t, [&] {
        world.all_gather(std::span<const float>(from.data(), counts[0]),
                         std::span(all.data(), counts[0] * ranks), counts);
        return 0;
      });
      gather.seconds.push_back(t);
    }
    if (rank.world_rank() != 0) return;
    cal.gemm_flops = 2.0 * s * s * s / gemm.median();
    cal.copy_bw = bytes / copy.median();
    const double gathered = 4.0 * counts[0] * ranks;
    cal.busbw = ranks > 1 ? gathered * (ranks - 1) / ranks / gather.median() : cal.copy_bw;
  });
  return cal;
}

// The notes' four cases on [I, J] x [J, K]; case 3 reduces its product to [I, K].
template <class L, class R, class Out>
row sharded_case(const char* name, int x, int y, const options& o, const calibration& cal) {
  row r{"case", name, mesh_name(x, y), "forward", o.matrix, o.matrix, o.matrix, {}, {}, {}, {}};
  const cluster_t sys{mesh_t{x, y}, cal.profile(), {1, 1}};
  const double e = static_cast<double>(o.matrix);
  r.predicted = tpx::cost::predict_matmul<L, R>(sys, {e, e}, {e, e}, fp32);
  if constexpr (!std::is_void_v<Out>)
    r.predicted.comm += tpx::cost::predict_reshard<typename tpx::matmul_plan_t<L, R>::result, Out>(
        sys, e * e, fp32);
  on_mesh(x, y, [&](auto& rank, tpx::any_communicator&, auto&& timed) {
    const auto a = random_tensor<L>::make(rank, o.matrix, o.matrix, 1);
    const auto b = random_tensor<R>::make(rank, o.matrix, o.matrix, 2);
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      parts p;
      const double link_before = link_bytes_so_far(rank);
      product<Out>(a, b, p, timed);
      if (i < o.warmup || rank.world_rank() != 0) continue;
      r.compute.seconds.push_back(p.compute);
      r.comm.seconds.push_back(p.comm);
      r.counted_link_bytes = link_bytes_so_far(rank) - link_before;
    }
  });
  return r;
}

// Both passes of layout Layout, as two rows (forward, backward).
//   forward   Tmp = In W_in; Out = reduce(Tmp W_out)
//   backward  dOut = Out; dW_out = Tmp^T dOut; dTmp = dOut W_out^T; dW_in = In^T dTmp;
//             dIn = dTmp W_in^T; each gradient brought to its tensor's type
template <class Layout>
std::pair<row, row> layer(const char* name, int x, int y, std::int64_t batch, const options& o,
                          const calibration& cal) {
  using in_t = typename Layout::in;
  using w_in_t = typename Layout::w_in;
  using w_out_t = typename Layout::w_out;

  std::pair<row, row> r;
  r.first = {"layer", name, mesh_name(x, y), "forward", batch, o.d_model, o.d_ff, {}, {}, {}, {}};
  r.second = r.first;
  r.second.pass = "backward";
  const cluster_t sys{mesh_t{x, y}, cal.profile(), {1, 1}};
  const mlp::layer_estimate e = mlp::predict_layer<Layout>(
      sys,
      {static_cast<double>(batch), static_cast<double>(o.d_model), static_cast<double>(o.d_ff)},
      fp32);
  r.first.predicted = e.forward;
  r.second.predicted = e.backward;
  on_mesh(x, y, [&](auto& rank, tpx::any_communicator&, auto&& timed) {
    const auto in = random_tensor<in_t>::make(rank, batch, o.d_model, 1);
    const auto w_in = random_tensor<w_in_t>::make(rank, o.d_model, o.d_ff, 2);
    const auto w_out = random_tensor<w_out_t>::make(rank, o.d_ff, o.d_model, 3);
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      parts f, b;
      double forward_link = 0, backward_link = 0;
      tpx::cost::mlp::run_step<Layout, tpx::host_space>(
          in, w_in, w_out, [&](tpx::cost::step_part part, auto&& fn) {
            using enum tpx::cost::step_part;
            const bool forward = part == forward_communication || part == forward_compute;
            double& total = part == forward_communication ? f.comm
                            : part == forward_compute     ? f.compute
                            : part == backward_communication ? b.comm
                                                             : b.compute;
            const double link_before = link_bytes_so_far(rank);
            auto result = timed(total, fn);
            (forward ? forward_link : backward_link) += link_bytes_so_far(rank) - link_before;
            return result;
          });
      if (i < o.warmup || rank.world_rank() != 0) continue;
      r.first.compute.seconds.push_back(f.compute);
      r.first.comm.seconds.push_back(f.comm);
      r.second.compute.seconds.push_back(b.compute);
      r.second.comm.seconds.push_back(b.comm);
      r.first.counted_link_bytes = forward_link;
      r.second.counted_link_bytes = backward_link;
    }
  });
  return r;
}

// The same work on one rank alone: the unsharded product, or pass of the layer
// (In[I, J] W_in[J, K] W_out[K, J], I = B, J = D, K = F).
void unsharded(row& r, const options& o) {
  on_mesh(1, 1, [&](auto& rank, tpx::any_communicator&, auto&& timed) {
    using M = tpx::Tensor<float, I<>, J<>>;
    using N = tpx::Tensor<float, J<>, K<>>;
    const auto a = random_tensor<M>::make(rank, r.m, r.k, 1);
    const auto b = random_tensor<N>::make(rank, r.k, r.n, 2);
    const auto c = random_tensor<tpx::Tensor<float, K<>, J<>>>::make(rank, r.n, r.k, 3);
    const auto repeat = [&](auto&& fn) {
      for (int i = 0; i < o.warmup + o.iters; ++i) {
        double t = 0;
        timed(t, fn);
        if (i >= o.warmup) r.unsharded.seconds.push_back(t);
      }
    };
    if (r.kind != "layer") {
      repeat([&] { return tpx::matmul(a, b); });
    } else if (r.pass == "forward") {
      repeat([&] { return tpx::matmul(tpx::matmul(a, b), c); });
    } else {
      const auto tmp = tpx::matmul(a, b);
      const auto out = tpx::matmul(tmp, c);  // dOut
      repeat([&] {
        (void)tpx::contract<I>(tmp, out);            // dW_out[K, J]
        const auto dtmp = tpx::contract<J>(out, c);  // dTmp[I, K]
        (void)tpx::contract<I>(a, dtmp);             // dW_in[J, K]
        return tpx::contract<K>(dtmp, b);            // dIn[I, J]
      });
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{
      "tpx-bench-matmul-strategies: sharded matmuls and MLP layouts, measured and "
      "predicted"};
  app.add_option("-g,--ranks", o.ranks, "rank counts (threads), e.g. 2,4; meshes factor them")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  app.add_option("--batch", o.batches, "tokens B of the layer rows")->delimiter(',');
  app.add_option("-d,--d-model", o.d_model, "D")->check(CLI::Range(1, 1 << 20));
  app.add_option("-f,--d-ff", o.d_ff, "F")->check(CLI::Range(1, 1 << 20));
  app.add_option("-m,--matrix", o.matrix, "I = J = K of the four cases")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("-n,--iters", o.iters, "timed runs (median)")->check(CLI::Range(1, 1 << 20));
  app.add_option("-w,--warmup_iters", o.warmup, "untimed runs first")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--json", o.json, "write every row to this file as JSON");
  CLI11_PARSE(app, argc, argv);

  try {
    std::printf("# tpx-bench-matmul-strategies: on %d cores (load average %.2f), fp32\n",
                tpx::bench::usable_cores(), tpx::bench::load_average());
    nlohmann::json out = nlohmann::json::array();
    nlohmann::json profiles = nlohmann::json::array();
    for (const int g : o.ranks) {
      const calibration cal = calibrate(g);
      std::printf(
          "#\n# %d ranks; this machine with them all busy, per rank: sgemm %.2f GFLOP/s, "
          "memcpy %.2f GB/s, all_gather busbw %.2f GB/s\n",
          g, cal.gemm_flops / 1e9, cal.copy_bw / 1e9, cal.busbw / 1e9);
      profiles.push_back(profile_json(cal, g));
      print_header();
      const auto add = [&](row r) {
        unsharded(r, o);
        print_row(r);
        nlohmann::json j = to_json(r);
        j["ranks"] = g;
        j["profile"] = {{"gemm_gflops_per_rank", cal.gemm_flops / 1e9},
                        {"memcpy_gbps_per_rank", cal.copy_bw / 1e9},
                        {"all_gather_busbw_gbps", cal.busbw / 1e9}};
        out.push_back(std::move(j));
      };
      const auto add_layer = [&](std::pair<row, row> passes) {
        add(std::move(passes.first));
        add(std::move(passes.second));
      };
      // The 2-D meshes: every x * y = g with both sides > 1 (none for a prime g).
      std::vector<int> xs;
      for (int x = 2; x < g; ++x)
        if (g % x == 0) xs.push_back(x);
      using IX_J = tpx::Tensor<float, I<X>, J<>>;
      for (int x : xs)
        add(sharded_case<IX_J, tpx::Tensor<float, J<>, K<Y>>, void>("case1", x, g / x, o, cal));
      add(sharded_case<tpx::Tensor<float, I<>, J<X>>, tpx::Tensor<float, J<>, K<>>, void>(
          "case2", g, 1, o, cal));
      add(sharded_case<tpx::Tensor<float, I<>, J<X>>, tpx::Tensor<float, J<X>, K<>>,
                       tpx::Tensor<float, I<>, K<>>>("case3", g, 1, o, cal));
      add(sharded_case<IX_J, tpx::Tensor<float, J<>, K<X>>, void>("case4", g, 1, o, cal));
      for (std::int64_t b : o.batches) {
        add_layer(layer<mlp::dp>("dp", g, 1, b, o, cal));
        add_layer(layer<mlp::fsdp>("fsdp", g, 1, b, o, cal));
        add_layer(layer<mlp::tp>("tp", 1, g, b, o, cal));
        for (int x : xs) add_layer(layer<mlp::fsdp_tp>("fsdp_tp", x, g / x, b, o, cal));
      }
    }
    if (!o.json.empty())
      tpx::bench::write_json(o.json, "matmul_strategies", tpx::bench::command_line(argc, argv),
                             {{"ranks", o.ranks},
                              {"iters", o.iters},
                              {"warmup", o.warmup},
                              {"profiles", std::move(profiles)}},
                             std::move(out));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpx-bench-matmul-strategies: %s\n", e.what());
    return 2;
  }
}

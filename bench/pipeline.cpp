// tpx-bench-pipeline: what pipeline parallelism costs and saves on this machine. A residual stack
// of L layers x <- x + GELU(x W), W [D, D], fp32, trained (forward and backward, the weight
// gradients summed over microbatches) as P stages of L / P layers over M microbatches of a batch of
// B rows (interleaved: v chunks of L / (P v) layers per stage; zero-bubble V: two of L / (2 P)), in
// GPipe's, 1F1B's, zero-bubble's, the interleaved 1F1B's and zero-bubble V's orders
// (nn/pipeline_schedule.hpp), beside the same stack on one stage.
//
//   tpx-bench-pipeline -p 1,2 -m 1,2,4,8,16 -L 8 -d 512 -b 512 -n 9 -w 2 -x step,background
//       --json pipeline.json
//
// The stage is examples/pipeline/residual_stack.hpp's (its weights gathered once per step). The
// ranks are the threads of tpx::spmd(tpx::host, Mesh<P, X>{p, 1}), which gives each rank's GEMMs
// the machine's cores divided among the ranks (spmd.hpp): P stages and one stage run on the same
// cores. Per row:
//   step       the best of -n steps after -w, rank 0's wall time between two barriers of all
//              ranks (so a step lasts until the slowest stage is done)
//   speed      one stage's step time (the same M) over this row's: what cutting the stack into
//              P stages on this machine's cores gives
//   idle       the share of a stage's step time spent outside its weights' gather and its
//              forward, backward and weight steps (waiting for its neighbours and passing blocks
//              to them), averaged over the stages and the timed steps: the measured bubble,
//              beside the schedule's share of idle ticks (pipeline_schedule::bubble: (P - 1) /
//              (M + P - 1) for GPipe and 1F1B, whose backward ticks do twice a forward's work;
//              (P - 1) / (v M + P - 1) interleaved, whose ticks run one chunk of L / (P v) layers;
//              (ticks - 6 M) / ticks zero-bubble V, whose ticks run a chunk's F, B or W)
//   passes     where run_pipeline's passes ran (-x): in the step, or in the background on each
//              rank's communication thread, where a stage computes on while its blocks move
//   model      the idle share the schedule predicts if each stage meets the others at every
//              tick in which some stage sends (meeting_model_idle): the host's collectives in
//              the step; in the background a stage waits only for the blocks it needs
//   peak       the largest peak tensor memory of any stage during the timed steps
//              (rank.memory()), where 1F1B's bound on the microbatches in flight shows
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tpx/nn/pipeline.hpp>
#include <tpx/tpx.hpp>
#include <type_traits>
#include <utility>
#include <vector>

#include "../examples/pipeline/residual_stack.hpp"
#include "support/report.hpp"

namespace {

using namespace pipeline_example;  // P, X, S, B, D, E and the stack's stage
using tpx::bench::clock;
using tpx::bench::samples;
using tpx::bench::seconds_since;
using tpx::nn::pipeline_order;

using tpx::nn::pipeline_passes;

struct settings {
  int layers = 8;
  std::int64_t width = 512, batch = 512;
  int iters = 5, warmup = 1;
  int extra_in_flight = 0;  // zero-bubble's microbatches in flight beyond 1F1B's bound (V: chunks
                            // beyond 2 P)
  int chunks = 2;           // interleaved: chunks of layers per stage
};

struct measured {
  double seconds = 0;
  double idle = 0;  // the stages' mean share of their step time outside their steps
  std::int64_t peak_bytes = 0;
};

// Adds the time from construction to destruction to `total`.
struct timed_pass {
  double& total;
  clock::time_point start = clock::now();
  ~timed_pass() { total += seconds_since(start); }
};

// The schedule of a row: the zero-bubble orders' with -e extra in flight, interleaved with -v
// chunks per stage.
tpx::nn::pipeline_schedule schedule_of(const settings& c, int stages, int microbatches,
                                       pipeline_order order) {
  tpx::nn::pipeline_options options;
  if (order == pipeline_order::zero_bubble || order == pipeline_order::zero_bubble_v)
    options.extra_in_flight = c.extra_in_flight;
  if (order == pipeline_order::interleaved) options.chunks = c.chunks;
  return {stages, microbatches, order, options};
}

// Best step time and the largest stage peak of the stack on `stages` stages, M microbatches, the
// passes in the step or in the background.
measured run(const settings& c, int stages, int microbatches, pipeline_order order,
             pipeline_passes passes = pipeline_passes::in_step) {
  measured result;
  std::mutex lock;
  tpx::spmd(tpx::host, tpx::Mesh<P, X>{stages, 1}, [&](auto& rank) {
    using stage_t = residual_stage<tpx::space_of_t<std::remove_cvref_t<decltype(rank)>>>;
    using rows = typename stage_t::rows;
    const std::int64_t microbatch_rows = c.batch / microbatches;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.width));
    const tpx::nn::pipeline_schedule plan = schedule_of(c, stages, microbatches, order);
    std::vector<stage_t> pieces;  // by chunk: the stage's layers, in one chunk but two or more
                                  // under interleaved and zero-bubble V
    for (int chunk = 0; chunk < plan.chunks(); ++chunk) {
      std::vector<typename stage_t::weight> weights;
      for (int i = 0; i < c.layers / (stages * plan.chunks()); ++i)
        weights.push_back(tpx::randn<float, S<P>, D<X>, E<>>(
            rank, {S(stages), D(c.width), E(c.width)}, 10 + 100 * chunk + i, scale));
      pieces.emplace_back(rank, std::move(weights), plan, chunk);
    }
    std::vector<rows> batch;
    for (int m = 0; m < microbatches; ++m)
      batch.push_back(tpx::randn<float, S<P>, B<X>, D<>>(
          rank, {S(stages), B(microbatch_rows), D(c.width)}, 100 + m));
    const rows like(rank, {S(stages), B(microbatch_rows), D(c.width)});
    const bool first = rank.template axis<P>().coord == 0;

    double busy = 0;  // in forward, backward and weight steps, over the steps
    const auto step = [&] {
      {
        const timed_pass pass{busy};  // the stage's own work: a copy here, where X has one rank
        for (stage_t& piece : pieces) piece.gather();
      }
      const auto forward = [&](int m, int chunk, rows in) {
        const timed_pass pass{busy};
        return pieces[chunk].forward(m, first && chunk == 0 ? rows(batch[m]) : std::move(in));
      };
      const auto backward = [&](int m, int chunk, rows dout) {  // the loss 0.5 |x_L|^2: dx_L = x_L
        const timed_pass pass{busy};
        stage_t& piece = pieces[chunk];
        return piece.backward(m, piece.last ? *piece.outputs[m] * 1.0f : std::move(dout));
      };
      const auto weight = [&](int m, int chunk) {
        const timed_pass pass{busy};
        pieces[chunk].weight_gradient(m);
      };
      tpx::nn::run_pipeline<P, S>(like, plan, passes, forward, backward, weight);
      for (stage_t& piece : pieces) piece.release();
    };
    tpx::any_communicator& world = rank.template group<P>();
    samples times;
    double stepping = 0;
    for (int i = 0; i < c.warmup + c.iters; ++i) {
      if (i == c.warmup) {
        rank.memory().reset_peak();
        busy = 0;
      }
      world.barrier();
      const auto start = clock::now();
      step();
      world.barrier();
      if (i >= c.warmup) {
        times.seconds.push_back(seconds_since(start));
        stepping += times.seconds.back();
      }
    }
    const std::lock_guard guard(lock);
    result.peak_bytes = std::max(result.peak_bytes, rank.memory().peak_bytes());
    result.idle += (1.0 - busy / stepping) / stages;
    if (rank.world_rank() == 0) result.seconds = times.best();
  });
  return result;
}

// The stages' mean idle share if each step took its work (a forward 1, a backward 2, or 1 when
// the weight gradient is a step of its own, a weight step 1; a chunk's steps alike) and the
// stages met at every tick in which one of them sends a block, running freely between meetings:
// run_pipeline's passes over P are collectives, which on the host are meetings of the threads.
// Where each meeting's stages ran equal work since the last, this is the schedule's bubble.
double meeting_model_idle(const tpx::nn::pipeline_schedule& plan) {
  using step = tpx::nn::pipeline_step;
  const int stages = plan.stages();
  const auto work = [&](const step& st) {
    return st.what == step::idle                                  ? 0.0
           : st.what == step::backward && !plan.splits_backward() ? 2.0
                                                                  : 1.0;
  };
  std::vector<double> clock(stages, 0.0), busy(stages, 0.0);
  for (int t = 0; t < plan.ticks(); ++t) {
    bool meet = false;
    for (int s = 0; s < stages; ++s) {
      clock[s] += work(plan.at(s, t));
      busy[s] += work(plan.at(s, t));
      meet = meet || plan.passes(s, t);
    }
    if (meet) std::fill(clock.begin(), clock.end(), *std::max_element(clock.begin(), clock.end()));
  }
  const double total = *std::max_element(clock.begin(), clock.end());
  double idle = 0;
  for (const double b : busy) idle += (1.0 - b / total) / stages;
  return idle;
}

std::string name_of(pipeline_order order, const settings& c) {
  if (order == pipeline_order::gpipe) return "gpipe";
  if (order == pipeline_order::one_f_one_b) return "1f1b";
  if (order == pipeline_order::interleaved) return "il" + std::to_string(c.chunks);
  const std::string zb = order == pipeline_order::zero_bubble_v ? "zbv" : "zb";
  return c.extra_in_flight == 0 ? zb : zb + "+" + std::to_string(c.extra_in_flight);
}

}  // namespace

int main(int argc, char** argv) {
  settings c;
  std::vector<int> stage_counts = {1, 2}, microbatch_counts = {1, 2, 4, 8};
  std::string json;
  CLI::App app{"tpx-bench-pipeline: the bubble and the memory of pipeline parallelism"};
  app.add_option("-p,--stages", stage_counts, "stage counts P (each divides -L)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  app.add_option("-m,--microbatches", microbatch_counts, "microbatch counts M (each divides -b)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app.add_option("-L,--layers", c.layers, "layers of the stack")->check(CLI::Range(1, 4096));
  app.add_option("-d,--width", c.width, "D")->check(CLI::Range(1, 1 << 16));
  app.add_option("-b,--batch", c.batch, "rows of a step's batch")->check(CLI::Range(1, 1 << 24));
  app.add_option("-n,--iters", c.iters, "timed steps (best)")->check(CLI::Range(1, 1000));
  app.add_option("-w,--warmup_iters", c.warmup, "untimed steps first")->check(CLI::Range(0, 1000));
  app.add_option("-e,--extra-in-flight", c.extra_in_flight,
                 "zero-bubble's microbatches in flight beyond 1F1B's bound (each takes a tick off "
                 "its bubble, up to P - 1); zero-bubble V's chunks beyond 2 P")
      ->check(CLI::Range(0, 4096));
  app.add_option("-v,--chunks", c.chunks,
                 "interleaved: chunks of layers per stage (rows where P > 1 divides M and P v "
                 "divides -L)")
      ->check(CLI::Range(2, 64));
  std::vector<std::string> pass_names = {"step"};
  app.add_option("-x,--passes", pass_names,
                 "where the passes between stages run: step (every stage meets at each tick in "
                 "which one sends), background (on each rank's communication thread); rows for "
                 "each (P > 1)")
      ->delimiter(',')
      ->check(CLI::IsMember({"step", "background"}));
  bool diagrams = false;
  app.add_flag("--diagrams", diagrams, "print each row's schedule, a line per stage (# lines)");
  app.add_option("--json", json, "write every row to this file as JSON");
  CLI11_PARSE(app, argc, argv);

  try {
    for (int p : stage_counts)
      if (c.layers % p != 0)
        throw std::invalid_argument(std::to_string(p) + " stages do not divide -L " +
                                    std::to_string(c.layers) + " layers");
    for (int m : microbatch_counts)
      if (c.batch % m != 0)
        throw std::invalid_argument(std::to_string(m) + " microbatches do not divide -b " +
                                    std::to_string(c.batch) + " rows");
    tpx::kernels::set_blas_threads(1);
    std::printf(
        "# tpx-bench-pipeline: L=%d layers x + GELU(x W), D=%lld, batch %lld rows, fp32, "
        "forward + backward; %d cores, load average %.2f\n",
        c.layers, static_cast<long long>(c.width), static_cast<long long>(c.batch),
        tpx::bench::usable_cores(), tpx::bench::load_average());
    std::printf("# %6s %10s %4s %5s %10s %7s %7s %7s %7s %10s\n", "order", "passes", "P", "M",
                "step(ms)", "speed", "idle", "bubble", "model", "peak(MiB)");
    nlohmann::json rows = nlohmann::json::array();
    for (int m : microbatch_counts) {
      const measured alone = run(c, 1, m, pipeline_order::gpipe);
      for (int p : stage_counts)
        for (pipeline_order order :
             {pipeline_order::gpipe, pipeline_order::one_f_one_b, pipeline_order::zero_bubble,
              pipeline_order::interleaved, pipeline_order::zero_bubble_v}) {
          if (order == pipeline_order::interleaved &&
              (p == 1 || m % p != 0 || c.layers % (p * c.chunks) != 0))
            continue;  // no interleaving on one stage; Megatron's order needs P | M
          if (order == pipeline_order::zero_bubble_v && (p == 1 || c.layers % (2 * p) != 0))
            continue;  // nor a V on one stage; two chunks a stage
          for (const std::string& passes : pass_names) {
            if (p == 1 && passes != pass_names.front()) continue;  // one stage passes nothing
            const pipeline_passes where =
                passes == "background" ? pipeline_passes::in_background : pipeline_passes::in_step;
            const measured r =
                p == 1 && order == pipeline_order::gpipe ? alone : run(c, p, m, order, where);
            const double speed = alone.seconds / r.seconds;
            const tpx::nn::pipeline_schedule plan = schedule_of(c, p, m, order);
            const double bubble = plan.bubble(), model = meeting_model_idle(plan);
            const double peak_mib = static_cast<double>(r.peak_bytes) / (1 << 20);
            std::printf("  %6s %10s %4d %5d %10.2f %7.3f %7.3f %7.3f %7.3f %10.2f\n",
                        name_of(order, c).c_str(), passes.c_str(), p, m, r.seconds * 1e3, speed,
                        r.idle, bubble, model, peak_mib);
            if (diagrams) {
              const std::string drawn = plan.diagram();
              for (std::size_t at = 0, end; at < drawn.size(); at = end + 1) {
                end = drawn.find('\n', at);
                std::printf("#   %s\n", drawn.substr(at, end - at).c_str());
              }
            }
            rows.push_back({{"order", name_of(order, c)},
                            {"passes", passes},
                            {"stages", p},
                            {"microbatches", m},
                            {"step_ms", r.seconds * 1e3},
                            {"one_stage_ms", alone.seconds * 1e3},
                            {"speed", speed},
                            {"idle", r.idle},
                            {"bubble", bubble},
                            {"meeting_model", model},
                            {"peak_mib", peak_mib}});
          }
        }
    }
    if (!json.empty())
      tpx::bench::write_json(json, "pipeline", tpx::bench::command_line(argc, argv),
                             {{"layers", c.layers},
                              {"width", c.width},
                              {"batch", c.batch},
                              {"iters", c.iters},
                              {"warmup", c.warmup},
                              {"extra_in_flight", c.extra_in_flight},
                              {"chunks", c.chunks}},
                             std::move(rows));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpx-bench-pipeline: %s\n", e.what());
    return 2;
  }
}

// The training loop of the example trainers, as a function the command lines (tpx-train's
// train.cpp, tpx-gpt's examples/gpt/train.cpp) and the tests (tests/trainer/) all call: run one
// SPMD program on a mesh, report the loss of every step. It is written once for any model family
// (the MLP's `trainer::mlp` in model.hpp, the transformer's `gpt::family`): a family names its
// config, its parameter set, its network and its batches, and the loop, optimizer, clipping and
// checkpoints here are the same for all.
//
// Each rank: initialize (or resume) its shards, then per step load its rows of the batch, run
// forward and backward, clip by the global gradient norm, and apply AdamW to its shards
// (train_step.hpp; with --cuda-graph, recorded once and replayed: recorded_training.hpp). The
// step runs in the rank's memory space from end to end: the batch is copied in, and nothing
// comes back unless the step reports, every --report-every steps and before every save, when the
// loss and gradient norm (two scalars) are read back and rank 0 reports progress (with
// --profile-phases, its last report adds the time of each phase the step marks); a non-finite
// loss or norm stops the run there, before the step is saved or logged. Checkpoints
// (io/checkpoint.hpp) hold every rank's shards of the parameters and Adam moments; --resume loads
// the newest valid one onto whatever mesh this run has, and since a batch is a function of the
// step number, the step is the whole data position. The checkpoint folder is created, locked and
// tidied before any training work, so that an unusable or busy folder fails at once, by one
// process for all (world rank 0 under mpirun, torchrun or srun: checkpointing below). The
// launcher is a parameter: tpx::host (a thread per rank) or tpx::mpi (a process per rank) for
// tpx-train, tpx::cuda_simulated (a thread and a stream per rank on one GPU) and the NCCL
// launchers for tpx-train-cuda; the tensors follow the rank's memory space.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tpx/io/checkpoint.hpp>
#include <tpx/io/json_integer.hpp>
#include <tpx/launch/process_group.hpp>
#include <tpx/spmd/background.hpp>
#include <tpx/spmd/phase_clock.hpp>
#include <utility>
#include <vector>

#include "mlp_family.hpp"
#include "recorded_training.hpp"
#include "run_options.hpp"
#include "train_step.hpp"

namespace trainer {

using options = run_options<mlp>;  // tpx-train's

// The mesh of o's sizes: Mesh<X, Y>{x, y}, Mesh<R, X, Y>{r, x, y} for a family with a replica
// axis, or Mesh<P, X, Y>{stages, x, y} for a pipelined one; a family without a replica axis takes
// no replicas.
template <class Family>
typename Family::mesh mesh_of(const run_options<Family>& o) {
  if constexpr (has_replica_axis<Family>) {
    return {o.mesh_r, o.mesh_x, o.mesh_y};
  } else {
    if (o.mesh_r != 1)
      throw std::invalid_argument("trainer: mesh_r is " + std::to_string(o.mesh_r) +
                                  ", but this model's mesh has no replica axis R (give 1)");
    if constexpr (is_pipelined<Family>)
      return {o.model.stages, o.mesh_x, o.mesh_y};
    else
      return {o.mesh_x, o.mesh_y};
  }
}

// o's mesh as --mesh spells it: "2x2" (XxY), or "2x2x2" (RxXxY) with more than one replica.
template <class Family>
std::string mesh_text(const run_options<Family>& o) {
  const std::string xy = std::to_string(o.mesh_x) + "x" + std::to_string(o.mesh_y);
  return o.mesh_r == 1 ? xy : std::to_string(o.mesh_r) + "x" + xy;
}

// What rank 0 reports after every report_every-th step. Communication is rank 0's
// (tpx::communication_time): all of it, on the rank's own thread and in the background (which
// overlaps the step, so shares of the step add up to more than 1), and the part the rank waited
// for, which is all of it when nothing runs in the background.
struct step_report {
  int step;
  float loss;
  float grad_norm;
  double seconds;                     // wall time per step since the last report
  double collective_seconds;          // communication, per step
  double exposed_collective_seconds;  // of which not hidden behind computation, per step
  std::int64_t peak_bytes;            // the most tensor memory rank 0 has held so far (memory_meter)
  bool replayed = false;              // the step replayed a recording (--cuda-graph on a GPU)
  // With --profile-phases, in the last step's report: rank 0's phases (tpx::phase_timing) over
  // the steps after the first, whose wall time is phase_wall_seconds (phases add up to less:
  // the reports between steps are in no phase).
  std::vector<tpx::phase_time> phases;
  int phase_steps = 0;
  double phase_wall_seconds = 0;
  // What rank 0's collectives put on its link per step since the last report, by set of mesh
  // axes ("X", "Y", "X, Y": rank_context::traffic_by_axis_names; nccl-tests' bus bytes), as
  // --dry-run counts them; empty when steps replayed a recording (--cuda-graph), whose
  // collectives no communicator sees.
  std::vector<std::pair<std::string, double>> link_bytes_per_step;
};

// A parameter set whose tensors stack the layers of pipeline stages, each block saved as the
// layer it is (pipelined_tensors::for_each_layer).
template <class Tensors>
concept stacks_layers = requires(Tensors& t) {
  t.for_each_layer([](const auto&, auto&) {});
};

// name_of's names with `prefix` ("param."), "" kept for the blocks saved under no name.
template <class NameOf>
auto prefixed(const std::string& prefix, const NameOf& name_of) {
  return [prefix, &name_of](std::int64_t s) {
    const std::string name = name_of(s);
    return name.empty() ? name : prefix + name;
  };
}

// The tensors a checkpoint holds, by name: whole(name, t) for each parameter and both its Adam
// moments ("param.<name>", "adam.m.<name>", "adam.v.<name>"), or, for a set that stacks the
// layers of pipeline stages, blocks(name_of, t), each block of t the layer named name_of(s). So a
// pipelined model's checkpoint holds the tensors of the model without stages, under its names.
template <class Tensors, class Whole, class Blocks>
void for_each_checkpointed(Tensors& params, Tensors& m, Tensors& v, const Whole& whole,
                           const Blocks& blocks) {
  if constexpr (stacks_layers<Tensors>) {
    params.for_each_layer(
        [&](const auto& name_of, auto& p, auto& pm, auto& pv) {
          blocks(prefixed("param.", name_of), p);
          blocks(prefixed("adam.m.", name_of), pm);
          blocks(prefixed("adam.v.", name_of), pv);
        },
        m, v);
  } else {
    params.for_each(
        [&](const std::string& name, auto& p, auto& pm, auto& pv) {
          whole("param." + name, p);
          whole("adam.m." + name, pm);
          whole("adam.v." + name, pv);
        },
        m, v);
  }
}

// The checkpoint of the training state after `step` steps: every rank's shards of the
// parameters and of both Adam moments, and the run's settings.
template <class Family, class Rank, class Tensors>
void save_checkpoint(const Rank& rank, const tpx::io::checkpoint_directory& dir,
                     const run_options<Family>& o, int step, const Tensors& params,
                     const Tensors& m, const Tensors& v) {
  tpx::io::checkpoint_writer out(rank, dir, step);
  for_each_checkpointed(
      params, m, v, [&](const std::string& name, const auto& t) { out.add(name, t); },
      [&](const auto& name_of, const auto& t) { out.add_blocks(name_of, t); });
  nlohmann::json state = Family::shape(o.model);
  state.update({{"data_position", step},  // batches are a function of the step (text_data.hpp)
                {"mesh", mesh_text(o)},
                {"lr", o.lr},
                {"bf16", o.bf16}});
  out.save(state);
}

// The step to resume from: that of the checkpoint in, whose data position must be that step
// (batches are a function of the step) and a step this trainer counts to.
inline int resume_step(const tpx::io::checkpoint_reader& in, const std::string& dir) {
  const std::int64_t position = tpx::io::json_integer<std::int64_t>(
      in.state().at("data_position"), "the state's data_position", dir);
  if (position < 0 || position != in.step() || position > std::numeric_limits<int>::max())
    throw std::runtime_error("trainer: --resume: the checkpoint of step " +
                             std::to_string(in.step()) + " in " + dir + " has data_position " +
                             std::to_string(position) + ", not its step (between 0 and " +
                             std::to_string(std::numeric_limits<int>::max()) + ")");
  return static_cast<int>(position);
}

// Loads the checkpoint of `step` in o.ckpt_dir into this rank's shards, once its shape
// (recorded_shape, model_family.hpp) is this run's.
template <class Family, class Tensors>
void load_checkpoint(const run_options<Family>& o, int step, Tensors& params, Tensors& m,
                     Tensors& v) {
  tpx::io::checkpoint_reader in(o.ckpt_dir, step);
  const nlohmann::json recorded = recorded_shape<Family>(in.state());
  const nlohmann::json shape = Family::shape(o.model);  // alive while items() walks it
  for (const auto& [key, now] : shape.items()) {
    const nlohmann::json& saved = recorded.at(key);
    if (saved != now)
      throw std::runtime_error("trainer: --resume: the checkpoint in " + o.ckpt_dir + " has " +
                               key + " = " + saved.dump() + ", this run " + now.dump());
  }
  for_each_checkpointed(
      params, m, v, [&](const std::string& name, auto& t) { in.load(name, t); },
      [&](const auto& name_of, auto& t) { in.load_blocks(name_of, t); });
}

// Where a run's checkpoints go (none without --ckpt-dir) and the step it resumes from, made once
// per process before any training work. The launch's first process (the only one of the thread
// backend; world rank 0 under a launcher) creates, locks and tidies o.ckpt_dir and, for --resume,
// finds the newest valid checkpoint in it (warning on stderr about each damaged one skipped) and
// continues its run; then it tells every other process the run id and the step, or its error,
// which they then fail with too (tpx::first_process_decides). Only then do the others join the
// folder (held_elsewhere): none touches it before it is locked and tidied, and all resume from
// the one checkpoint the first picked. A new run (no --resume) refuses a folder that holds
// complete checkpoints: its saves would replace that run's steps and --keep would delete the
// rest. A launcher whose processes have no way to agree (no tpx::processes_of for it) gets no
// checkpoints rather than a folder every process would lock.
struct checkpointing {
  template <class Family, class Launcher>
  checkpointing(const run_options<Family>& o, const Launcher& launcher) {
    if (o.ckpt_dir.empty()) return;
    if constexpr (requires { processes_of(launcher); }) {  // found by argument-dependent lookup
      const nlohmann::json decided = nlohmann::json::parse(
          tpx::first_process_decides(processes_of(launcher), [&] { return hold(o).dump(); }));
      if (dir) return;
      dir.emplace(o.ckpt_dir, tpx::io::held_elsewhere{decided.at("run_id").get<std::string>()});
      first_step = decided.at("first_step").get<int>();
    } else {
      throw std::invalid_argument(
          "trainer: --ckpt-dir: checkpoints need the processes of this launch to agree on one "
          "holder of the folder's lock, one run id and one step to resume from before training, "
          "and its launcher gives them no way to (it has no tpx::processes_of: "
          "launch/process_group.hpp): give it one, or run without --ckpt-dir");
    }
  }
  std::optional<tpx::io::checkpoint_directory> dir;
  int first_step = 0;

 private:
  // The first process's part: holds the folder, picks the checkpoint to resume.
  template <class Family>
  nlohmann::json hold(const run_options<Family>& o) {
    dir.emplace(o.ckpt_dir, tpx::io::checkpoint_directory_options{.keep = o.keep});
    if (o.resume) {
      const auto in = tpx::io::checkpoint_reader::open_newest_valid(o.ckpt_dir, std::cerr);
      first_step = resume_step(in, o.ckpt_dir);
      if (first_step >= o.steps)
        throw std::runtime_error("trainer: --resume: the newest valid checkpoint in " + o.ckpt_dir +
                                 " is of step " + std::to_string(first_step) + "; --steps " +
                                 std::to_string(o.steps) + " leaves nothing to train (give more)");
      dir->continue_run(in.run_id());
    } else {
      refuse_earlier_checkpoints(o.ckpt_dir);
    }
    return {{"run_id", dir->run_id()}, {"first_step", first_step}};
  }

  static void refuse_earlier_checkpoints(const std::string& ckpt_dir) {
    const std::vector<std::int64_t> steps = tpx::io::complete_steps(ckpt_dir);
    if (steps.empty()) return;
    throw std::runtime_error(
        "trainer: --ckpt-dir " + ckpt_dir + " holds " + std::to_string(steps.size()) +
        " checkpoint(s) of an earlier run, the newest of step " +
        std::to_string(*std::max_element(steps.begin(), steps.end())) +
        ": pass --resume to continue that run, or give an empty folder (a new run would "
        "overwrite its steps, and --keep delete the rest)");
  }
};

// The error that stops a run whose loss or gradient norm is not finite (a learning rate too
// large, data the model cannot represent): every rank reads the same reduced scalars, so every
// rank stops at the same step, before that step is saved or logged.
inline std::runtime_error non_finite_step(int step, float loss, float norm) {
  return std::runtime_error("trainer: step " + std::to_string(step) + ": the loss is " +
                            std::to_string(loss) + " and the gradient norm " +
                            std::to_string(norm) +
                            "; stopping before anything of this step is saved or logged (a "
                            "smaller --lr, or --clip, may help)");
}

// What --cuda-graph came to, said once on standard error: nothing where the backend records
// nothing (the host).
inline void report_recording(const tpx::recorded_step& recording) {
  if (recording.recorded())
    std::cerr << "trainer: --cuda-graph: the step is recorded as a CUDA graph and replayed\n";
  else if (!recording.failure().empty())
    std::cerr << "trainer: --cuda-graph: the step could not be recorded, so it runs unrecorded: "
              << recording.failure() << "\n";
}

template <class Tc, class Family, class Rank>
void train_rank(Rank& rank, const run_options<Family>& o, const checkpointing& ckpt,
                const text_data& data, const std::function<void(const step_report&)>& report) {
  using Space = tpx::space_of_t<Rank>;
  using Tensors = typename Family::template tensors<Space>;
  Tensors params(rank, o.model), m(rank, o.model), v(rank, o.model);
  std::optional<Tensors> grads;  // a recorded step makes its own
  if (!o.cuda_graph) grads.emplace(rank, o.model);
  Family::initialize(params, o.model);
  const int first = ckpt.first_step;
  if (o.resume) load_checkpoint(o, first, params, m, v);
  typename Family::template network<Tc, Space> net(rank, o.model);
  std::optional<recorded_training<Family, Space>> recorded;
  if (o.cuda_graph) recorded.emplace(rank, o, data, first);
  std::optional<step_result<Space>> unrecorded;
  auto since = std::chrono::steady_clock::now();
  tpx::communication_seconds comm_since = tpx::communication_time(rank);
  std::vector<tpx::axes_traffic> traffic_at_report = rank.traffic_by_axis_names();
  int last_report = first - 1;
  // --profile-phases: rank 0's phases, from the second step on (the first warms up: plans,
  // memory), unless there is only one.
  std::optional<tpx::phase_timing> timing;
  if (o.profile_phases && rank.world_rank() == 0) timing.emplace(rank);
  int timed_first = first;
  auto timed_since = since;
  for (int step = first; step < o.steps; ++step) {
    if (!recorded) unrecorded.emplace(train_step(rank, net, o, data, step, params, *grads, m, v));
    const step_result<Space>& result =
        recorded ? recorded->run(net, step, params, m, v) : *unrecorded;
    if (recorded && step == first + 1 && rank.world_rank() == 0)
      report_recording(recorded->recording());
    const bool last = step + 1 == o.steps;
    if (timing && step == first && !last) {
      timing->reset();  // waits for the first step's work
      timed_first = step + 1;
      timed_since = std::chrono::steady_clock::now();
    }
    const bool save = ckpt.dir && (last || (o.save_every > 0 && (step + 1) % o.save_every == 0));
    if (last || save || (step + 1 - first) % o.report_every == 0) {
      // The step's one wait for the device: two scalars, read where they are reported and
      // before every save, so that a non-finite step is never saved.
      const float loss = tpx::scalar_on_host(result.loss);
      const float norm = std::sqrt(tpx::scalar_on_host(result.grad_norm2));
      if (!std::isfinite(loss) || !std::isfinite(norm)) throw non_finite_step(step, loss, norm);
      const auto now = std::chrono::steady_clock::now();
      const double steps = step - last_report;
      const tpx::communication_seconds comm = tpx::communication_time(rank);
      if (rank.world_rank() == 0) {
        step_report r{step, loss, norm, std::chrono::duration<double>(now - since).count() / steps,
                      (comm.total - comm_since.total) / steps,
                      (comm.exposed - comm_since.exposed) / steps, rank.memory().peak_bytes(),
                      recorded && recorded->recording().recorded(), {}, 0, 0, {}};
        const std::vector<tpx::axes_traffic> traffic = rank.traffic_by_axis_names();
        if (!r.replayed)
          for (const tpx::axes_traffic& moved : tpx::traffic_since(traffic, traffic_at_report))
            r.link_bytes_per_step.emplace_back(moved.axes, moved.traffic.total().link_bytes / steps);
        traffic_at_report = traffic;
        if (timing && last) {
          r.phases = timing->totals();
          r.phase_steps = step + 1 - timed_first;
          r.phase_wall_seconds = std::chrono::duration<double>(now - timed_since).count();
        }
        report(r);
      }
      since = now;
      comm_since = comm;
      last_report = step;
    }
    if (save) save_checkpoint(rank, *ckpt.dir, o, step + 1, params, m, v);
  }
}

// Trains on the mesh of o's sizes (mesh_of) of the launcher's ranks (tpx::host by default);
// report(r) is called by rank 0 after every step. before_training runs once the checkpoint folder
// and the text have been checked, just before the ranks start. Errors of any rank come back as
// tpx::spmd_error naming the rank.
template <class Family, class Launcher = tpx::host_backend>
void run(const run_options<Family>& o, const std::function<void(const step_report&)>& report,
         Launcher launcher = {}, const std::function<void()>& before_training = {}) {
  const typename Family::mesh mesh = mesh_of(o);
  if (o.cuda_graph && mesh.rank_count() != 1)
    throw std::invalid_argument(
        "trainer: --cuda-graph records the step of a mesh of one rank (1x1), and this mesh (" +
        mesh_text(o) + ") has " + std::to_string(mesh.rank_count()) +
        ": its ranks' collectives meet on the host at every call, which a replay would skip");
  if (o.cuda_graph && o.profile_phases)
    throw std::invalid_argument(
        "trainer: --profile-phases times the step between marks queued with its work, and a "
        "--cuda-graph replay queues none: drop one of the two");
  if (o.cuda_graph && o.steps > (1 << 24))
    throw std::invalid_argument("trainer: --cuda-graph: --steps " + std::to_string(o.steps) +
                                " is more than 16777216, the last step number AdamW's float "
                                "counter on the device holds exactly");
  const checkpointing ckpt(o, launcher);
  const text_data data(o.text, Family::context(o.model));
  if (before_training) before_training();
  typename Launcher::options launch;
  launch.timeout = o.timeout;
  tpx::spmd(launcher, mesh, [&](auto& rank) {
    if (o.bf16)
      train_rank<tpx::bf16>(rank, o, ckpt, data, report);
    else
      train_rank<float>(rank, o, ckpt, data, report);
  }, launch);
}

}  // namespace trainer

// What one training run is asked to do, for any model family: the options the example trainers'
// command line (command_line.hpp) fills in and their training loop (training.hpp) reads. Kept
// apart from both, so that parsing a command line needs no training code (the CLI fuzzing
// harness, tests/fuzz/trainer_cli_fuzz.cpp, parses without training).
#pragma once

#include <chrono>
#include <string>

namespace trainer {

// A model family, as training.hpp and the command line use it (trainer::mlp and gpt::family are
// two; the command line also reads about, size_flags and switch_flags, model_family.hpp):
//   config                    the model's sizes and seed, with members batch, seed and
//                             checkpoint_every
//   mesh                      tpx::Mesh<X, Y> over the family's axes, or Mesh<R, X, Y> with
//                             a replica axis R first (HSDP: the batch split over R too, the
//                             parameters replicated over it), or Mesh<P, X, Y> with pipeline
//                             stages P first (`pipelined`, P's size the config's `stages`)
//   tensors<Space>            every parameter-shaped tensor (params, grads, Adam moments)
//   network<Tc, Space>        forward_backward(params, batch, grads) -> loss scalar
//   initialize(tensors, c), load_batch<Space>(rank, data, c, step)
//   context(c)                bytes of text one row of a batch reads, minus one
//   shape(c)                  the sizes a checkpoint must match to be resumed, as JSON
//   tokens_per_step(c), flops_per_step(c)   for the progress line (model FLOPs: fwd + bwd)
//   describe(c)               the sizes, for the first line of a run
template <class Family>
struct run_options {
  typename Family::config model;
  int mesh_r = 1;  // replicas: the size of axis R, for a family whose mesh has one (else 1)
  int mesh_x = 2;
  int mesh_y = 2;
  int steps = 300;
  float lr = 3e-3f;
  float weight_decay = 0.0f;
  float clip = 1.0f;
  bool bf16 = false;
  std::string text = "/usr/share/common-licenses/GPL-3";
  std::string ckpt_dir;  // where checkpoints go; empty: none
  int save_every = 0;    // also save every N steps (the last step is always saved)
  bool resume = false;   // continue from ckpt_dir's newest valid checkpoint, on any mesh
  int keep = 3;          // checkpoints kept in ckpt_dir, the newest; 0: all
  int report_every = 1;  // read the loss back and report every N steps (and the last)
  // Record the step once and replay it (CUDA graphs, recorded_training.hpp); a mesh of one rank.
  bool cuda_graph = false;
  // Time rank 0's step phase by phase (tpx::phase_timing) and report the phases with the last step.
  bool profile_phases = false;
  // How long a rank waits in a collective for the others before the run fails naming them.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

// Whether Family's model is cut into pipeline stages over an axis P before X and Y:
// Mesh<P, X, Y>, P's size the config's `stages` (pipelined_family.hpp).
template <class Family>
inline constexpr bool is_pipelined = requires {
  requires Family::pipelined;
};

// Whether Family's mesh has a replica axis R before X and Y: Mesh<R, X, Y>.
template <class Family>
inline constexpr bool has_replica_axis = Family::mesh::axis_count == 3 && !is_pipelined<Family>;

}  // namespace trainer

// Sharded checkpoints: each rank saves its blocks of the training state, and any mesh loads them.
//
// A trainer saves every N steps and resumes from the newest complete checkpoint:
//
//   // once per run, before training: creates, locks and tidies the folder, names the run
//   tpx::io::checkpoint_directory dir(opts.ckpt_dir, {.keep = 3});
//   // saving (every rank calls save; it returns once the checkpoint is complete)
//   tpx::io::checkpoint_writer out(rank, dir, step);
//   out.add("w_in", w_in);  out.add("adam.m.w_in", m_in);  out.add("adam.v.w_in", v_in);
//   out.save({{"data_position", loader.position()}, {"lr", opts.lr}});
//
//   // resuming, possibly on another mesh or into other shardings, from the newest valid one
//   if (tpx::io::latest_step(opts.ckpt_dir)) {
//     tpx::io::checkpoint_reader in(opts.ckpt_dir);  dir.continue_run(in.run_id());
//     in.load("w_in", w_in);  in.load("adam.m.w_in", m_in);  in.load("adam.v.w_in", v_in);
//     step = in.step();  loader.seek(in.state()["data_position"].get<std::int64_t>());
//   }
//
// The files are safetensors (safetensors.hpp), one per rank, so Python opens them with
// safetensors.safe_open; manifest.json says where each block of each tensor lies
// (checkpoint_layout.hpp). Writes are atomic and every file carries an XXH64 checksum
// (atomic_file.hpp), the manifest one of its own and the run id; one writer at a time holds the
// folder, and old checkpoints beyond `keep` are deleted (checkpoint_directory.hpp). Unreduced
// tensors (partial sums) are rejected at compile time.
#pragma once

#include "tpx/io/checkpoint_directory.hpp"
#include "tpx/io/checkpoint_layout.hpp"
#include "tpx/io/checkpoint_reader.hpp"
#include "tpx/io/checkpoint_writer.hpp"

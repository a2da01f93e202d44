// A pipeline's FSDP over X, once per step (pipelined_model.hpp): one chunk's weights all-gathered
// for the step, part by part in the order its first forward pass uses them (the embedding's
// tables, each block, the final norm and head), and each weight's gradient added up over the
// microbatches as a partial sum over X and reduce-scattered onto its master's shard as soon as
// the last microbatch has added to it: a block's in the last backward pass (or weight step) of
// the chunk, right after the block, the head's after the head, the tables' after the embedding.
//
// Each gather and each part's reductions is a task (trainer::start_task): with --overlap on it
// runs on the rank's communication thread (a CUDA rank's second stream), so the first forward
// pass waits for a block's weights only if their gather is not done when it reaches the block,
// and the reductions run behind the rest of the last backward pass, as FSDP2 reduce-scatters
// each unit's gradients while the backward pass goes on. Without overlap every task runs at once
// on the rank's thread: the same operations on the same data in the same order, so the same
// bits. Every rank of an X group is on the same stage and runs the same schedule, so they start
// the same tasks in the same order.
//
//   chunk_fsdp<Net> fsdp(net, rank, overlap, masters, blocks, ends);  // starts the gathers
//   fsdp.ready_block(l);                 // block l's weights are in fsdp.weights()
//   ... the passes write into fsdp.partials() ...
//   fsdp.reduce_block(l, grads, reductions);  // the block's last microbatch has added its own
//   reductions.wait();                   // every gradient on its shard
#pragma once

#include <cstddef>
#include <optional>
#include <tpx/spmd/background.hpp>
#include <utility>
#include <vector>

#include "overlap.hpp"

namespace trainer {

// One chunk's weights and weight gradients over a step, for a pipeline whose X has more than one
// rank. Net is the piece's model (model<Tc, Space, S<P>>).
template <class Net>
class chunk_fsdp {
 public:
  using params = typename Net::params;
  using weights_t = typename Net::gathered_weights;
  using partials_t = typename Net::partial_gradients;
  using ends_t = typename Net::ends_run;
  using reductions_t = gradient_reductions<typename Net::shard_reduction>;

  chunk_fsdp(const chunk_fsdp&) = delete;
  chunk_fsdp& operator=(const chunk_fsdp&) = delete;

  // Starts gathering the parts of `masters` that a piece of `blocks` blocks running `ends` uses,
  // in the order of its forward pass; zeros of its partial gradients.
  chunk_fsdp(const Net& net, const tpx::rank_context& rank, bool overlap, const params& masters,
             int blocks, ends_t ends)
      : partials_(net.zero_partials(blocks, ends)),
        embeds_(ends.embedding),
        blocks_(static_cast<std::size_t>(blocks)) {
    const auto start = [&](auto gather) { tasks_.push_back(start_task(rank, overlap, gather)); };
    if (ends.embedding)
      start([this, &net, &masters] { embedding_ = net.gather_embedding(masters); });
    for (int l = 0; l < blocks; ++l)
      start([this, &net, &masters, l] { blocks_[l] = net.gather_block(masters, l); });
    if (ends.head) start([this, &net, &masters] { head_ = net.gather_head(masters); });
  }

  // The gathered weights the parts made ready so far hold (Net's passes take them).
  const weights_t& weights() const { return weights_; }
  partials_t& partials() { return partials_; }

  // Wait until weights() holds the embedding's tables, blocks 0..l, the final norm and head.
  void ready_embedding() { take_through(0); }
  void ready_block(int l) { take_through((embeds_ ? 1 : 0) + static_cast<std::size_t>(l)); }
  void ready_head() { take_through(tasks_.size() - 1); }

  // The gradients of the embedding's tables, of block l's weights, of the final norm and head,
  // reduce-scattered into grads by one task of `reductions` each.
  void reduce_embedding(params& grads, reductions_t& reductions) {
    for (std::size_t k = 0; k < partials_.embed.size(); ++k)
      reductions.add(typename Net::gather_embed{}, grads.embed[k], std::move(partials_.embed[k]));
    reductions.start();
  }
  void reduce_block(int l, params& grads, reductions_t& reductions) {
    using step = typename Net::gather_weight;
    reductions.add(step{}, grads.norm[l], std::move(partials_.norm[l]));
    reductions.add(step{}, grads.w_in[l], std::move(partials_.w_in[l]));
    reductions.add(step{}, grads.w_out[l], std::move(partials_.w_out[l]));
    reductions.start();
  }
  void reduce_head(params& grads, reductions_t& reductions) {
    using step = typename Net::gather_weight;
    reductions.add(step{}, grads.final_norm, std::move(*partials_.final_norm));
    reductions.add(step{}, grads.head, std::move(*partials_.head));
    reductions.start();
  }

 private:
  // Takes the gathers' results in the order they started, through task `last`, into weights_.
  void take_through(std::size_t last) {
    for (; taken_ <= last; ++taken_) {
      tasks_[taken_].get();
      if (taken_ == 0 && embeds_) {
        weights_.embed = std::move(*embedding_);
        embedding_.reset();
      } else if (blocks_taken_ < blocks_.size()) {
        typename Net::block_weights& b = *blocks_[blocks_taken_++];
        weights_.norm.push_back(std::move(b.norm));
        weights_.w_in.push_back(std::move(b.w_in));
        weights_.w_out.push_back(std::move(b.w_out));
      } else {
        weights_.final_norm = std::move(head_->final_norm);
        weights_.head = std::move(head_->head);
      }
    }
  }

  partials_t partials_;
  weights_t weights_;
  bool embeds_;
  // Each gather's result until it is taken into weights_; the slots are made before the tasks
  // start, so a task writes only its own. The tasks hold `this`: chunk_fsdp does not move.
  std::optional<decltype(weights_t::embed)> embedding_;
  std::vector<std::optional<typename Net::block_weights>> blocks_;
  std::optional<typename Net::head_weights> head_;
  std::vector<tpx::pending<void>> tasks_;
  std::size_t taken_ = 0, blocks_taken_ = 0;
};

}  // namespace trainer

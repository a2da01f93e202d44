// How the example models overlap FSDP's communication with their computation (--overlap on):
// the weights of the block the loop visits next are all-gathered while the current block
// computes, and each block's gradients are reduce-scattered while the next block's backward pass
// runs, as FSDP2 prefetches and reduce-scatters per unit. Both run as tasks on the rank's
// communication thread (tpx::in_background; a CUDA rank's second stream), or at once on the
// rank's own thread when overlap is off: the same operations on the same data either way, so the
// same bits.
//
//   prefetched_blocks<W> weights(rank, overlap, gather, block_visits(layers, every));
//   W w = weights.take(l);               // block l's, gathered during the visit before
//   gradient_reductions<R> reductions(rank, overlap);
//   reductions.add(chain, grads.w[l], partial);   // grads.w[l] = R::gradient<chain>(partial)
//   reductions.start();                  // the block's reductions, as one task
//   reductions.wait();                   // all of them done (before the optimizer step)
//
// Every rank starts the same tasks in the same order (they meet in their collectives in that
// order), so the visits are those of the block loop on every rank (trainer::block_visits). Used by
// the GPT example (examples/gpt/model.hpp) with overlap on and off, and by the MLP trainer
// (model.hpp) with overlap on (off, its passes gather each weight where they use it: one weight
// held at a time instead of two blocks').
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tpx/spmd/background.hpp>
#include <utility>
#include <vector>

namespace trainer {

// fn(), on the rank's communication thread while the calling thread goes on (overlap), or now.
template <class Fn>
auto start_task(const tpx::rank_context& rank, bool overlap, Fn fn) {
  return overlap ? tpx::in_background(rank, std::move(fn)) : tpx::at_once(std::move(fn));
}

// Every block's gathered weights W in the order the block loop visits the blocks, each gathered
// (gather(l)) one visit ahead: while the block before it computes. Two blocks' weights are held
// at a time, the one computing and the next, as in FSDP2's default.
template <class W>
class prefetched_blocks {
 public:
  prefetched_blocks(const tpx::rank_context& rank, bool overlap, std::function<W(int)> gather,
                    std::vector<int> visits)
      : rank_(rank), overlap_(overlap), gather_(std::move(gather)), visits_(std::move(visits)) {
    fetch_next();
  }

  // Block l's weights, l being the next visit's block; starts gathering the visit's after.
  W take(int l) {
    if (next_ >= visits_.size() || visits_[next_] != l)
      throw std::logic_error("trainer: block " + std::to_string(l) +
                             " was visited out of trainer::block_visits' order");
    W w = ahead_->get();
    ++next_;
    fetch_next();
    return w;
  }

 private:
  void fetch_next() {
    ahead_.reset();
    if (next_ < visits_.size())
      ahead_ = start_task(rank_, overlap_,
                          [&gather = gather_, l = visits_[next_]] { return gather(l); });
  }

  const tpx::rank_context& rank_;
  bool overlap_;
  std::function<W(int)> gather_;
  const std::vector<int> visits_;
  std::size_t next_ = 0;
  std::optional<tpx::pending<W>> ahead_;
};

// The gradients' reductions: added as the backward pass computes each partial gradient, started
// together when it is done with a block (or the head, or the tables), and all done by wait(). One
// task per block keeps the tasks, and the communication thread's wake-ups, few; each partial
// gradient lives until its task ends. Reduction::gradient<Chain>(partial) is what a partial
// gradient of a parameter that Chain gathers becomes: reduce-scattered onto the parameter's shards
// by Chain's adjoint (and, for a model with replicas, summed over them), in fp32 like the master.
template <class Reduction>
class gradient_reductions {
 public:
  gradient_reductions(const tpx::rank_context& rank, bool overlap)
      : rank_(rank), overlap_(overlap) {}

  // grad = Reduction::gradient<Chain>(partial), when the task it joins runs.
  template <class Chain, class Grad, class Partial>
  void add(Chain, Grad& grad, Partial partial) {
    // Handed to the reduction, which runs once: over axes of one rank its steps move the
    // partial's buffer on.
    batch_.push_back([&grad, partial = std::make_shared<Partial>(std::move(partial))] {
      grad = Reduction::template gradient<Chain>(std::move(*partial));
    });
  }

  // Starts the reductions added since the last start as one task.
  void start() {
    started_.push_back(start_task(rank_, overlap_, [batch = std::move(batch_)] {
      for (const std::function<void()>& reduce : batch) reduce();
    }));
    batch_.clear();
  }

  void wait() {
    for (tpx::pending<void>& task : started_) task.get();
  }

 private:
  const tpx::rank_context& rank_;
  bool overlap_;
  std::vector<std::function<void()>> batch_;
  std::vector<tpx::pending<void>> started_;
};

}  // namespace trainer

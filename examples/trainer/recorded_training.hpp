// recorded_training: the training step recorded once and replayed every step after
// (run_options::cuda_graph, tpx-train-cuda's --cuda-graph): on a CUDA rank the step's few hundred
// kernel launches become one graph launch (tpx::recorded_step), which is what a small,
// launch-bound step needs. The host records nothing and runs the same step as written, so the
// host backend checks that this form of the step computes what train_step does, bit for bit
// (tests/trainer/recorded_training_test.cpp).
//
// A recording replays the same kernels on the same buffers, so the step is arranged as
// spmd/recorded_work.hpp asks:
//   - its inputs keep their buffers: the batch is copied into the same tensors before each step
//     (tpx::copy_from_host), and AdamW reads its step number from a scalar in device memory,
//     which the step advances itself;
//   - its outputs keep theirs: the loss and squared gradient norm are assigned into two scalars
//     that the loop reads on the steps that report;
//   - everything else is made and freed inside the step: the gradients too (they are the step's
//     own), while the parameters and Adam moments are updated in place.
// The first step runs unrecorded, so that what it sets up for good (GEMM plans, a background
// lane) is made outside the recording; the second is recorded and every later one replays it.
#pragma once

#include <cstdint>
#include <tpx/spmd/recorded_step.hpp>
#include <tpx/tensor/staging.hpp>
#include <utility>

#include "train_step.hpp"

namespace trainer {

// h's elements into the batch d (one tensor; a family whose batch holds several overloads this
// for its own batch type, found by argument-dependent lookup: gpt::copy_batch).
template <class Space, class T, class... Spec>
void copy_batch(tpx::BasicTensor<Space, T, Spec...>& d,
                const tpx::BasicTensor<tpx::host_space, T, Spec...>& h) {
  tpx::copy_from_host(d, h);
}

template <class Family, class Space>
class recorded_training {
 public:
  using tensors = typename Family::template tensors<Space>;

  // For a run whose first step is `first` (counting from 0).
  recorded_training(const tpx::rank_context& rank, const run_options<Family>& o,
                    const text_data& data, int first)
      : rank_(rank),
        o_(o),
        data_(data),
        first_(first),
        batch_(Family::template load_batch<Space>(rank, data, o.model, first)),
        t_(rank, {}),
        out_{scalar(), scalar()} {
    tpx::BasicTensor<tpx::host_space, float> t(rank, {});
    t.local()[0] = static_cast<float>(first + 1);
    tpx::copy_from_host(t_, t);
  }

  // Training step `step`: steps must come one after another from `first`. The result's tensors
  // are the same every step.
  template <class Network>
  const step_result<Space>& run(Network& net, int step, tensors& params, tensors& m, tensors& v) {
    if (step != first_) {
      using trainer::copy_batch;
      copy_batch(batch_,
                 Family::template load_batch<tpx::host_space>(rank_, data_, o_.model, step));
    }
    auto work = [&] {
      tensors grads(rank_, o_.model);
      const step_result<Space> r = train_on_batch(net, o_, batch_, t_, params, grads, m, v);
      tpx::assign(out_.loss, r.loss);
      tpx::assign(out_.grad_norm2, r.grad_norm2);
      tpx::map_into(t_, tpx::kernels::add_scalar{1.0f}, t_);  // the next step's number
    };
    if (step == first_)
      work();
    else
      replayed_(rank_, work);
    return out_;
  }

  // The recording, once the second step has run: whether it replays, and if not why.
  const tpx::recorded_step& recording() const { return replayed_; }

 private:
  tpx::BasicTensor<Space, float> scalar() const { return {rank_, {}}; }

  const tpx::rank_context& rank_;
  const run_options<Family>& o_;
  const text_data& data_;
  int first_;
  decltype(Family::template load_batch<Space>(
      std::declval<const tpx::rank_context&>(), std::declval<const text_data&>(),
      std::declval<const typename Family::config&>(), std::int64_t{})) batch_;
  tpx::BasicTensor<Space, float> t_;  // AdamW's step number, counting from 1
  step_result<Space> out_;
  tpx::recorded_step replayed_;
};

}  // namespace trainer

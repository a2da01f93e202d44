// A model family that fails on purpose, for the fault-injection tests (issue 12): Family's
// model, except that world rank `injected_fault.rank` throws std::runtime_error("injected fault
// at step S") as its forward pass of step S = `injected_fault.step` begins, while the other ranks
// go on into theirs and wait in its first collective. The launcher must then stop every rank and
// name the failed one, on every backend, instead of leaving the others waiting.
#pragma once

#include <stdexcept>
#include <string>

#include "../../examples/trainer/training.hpp"

namespace trainer_test {

struct fault_plan {
  int rank = -1;
  int step = -1;
};
inline fault_plan injected_fault;  // set before trainer::run

template <class Family>
struct faulty : Family {
  template <class Tc, class Space>
  class network : public Family::template network<Tc, Space> {
    using base = typename Family::template network<Tc, Space>;

   public:
    template <class Rank>
    network(const Rank& rank, const typename Family::config& c)
        : base(rank, c), rank_(rank.world_rank()) {}

    template <class Params, class Batch>
    auto forward_backward(const Params& p, const Batch& batch, Params& grads) {
      if (rank_ == injected_fault.rank && step_ == injected_fault.step)
        throw std::runtime_error("injected fault at step " + std::to_string(step_));
      ++step_;
      return base::forward_backward(p, batch, grads);
    }

   private:
    int rank_;
    int step_ = 0;
  };
};

// The small MLP run of trainer_test_support.hpp on mesh x by y, with the fault family.
inline trainer::run_options<faulty<trainer::mlp>> faulty_run(int x, int y, int steps) {
  trainer::run_options<faulty<trainer::mlp>> o;
  o.model.batch = 24;
  o.model.d_model = 20;
  o.model.ffn = 36;
  o.model.layers = 4;
  o.model.context = 2;
  o.mesh_x = x;
  o.mesh_y = y;
  o.steps = steps;
  o.lr = 1e-2f;
  return o;
}

}  // namespace trainer_test

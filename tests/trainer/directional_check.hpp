// The gradient check both example models' tests use: for every tensor of a parameter set, the
// directional derivative along a random direction v, <grad, v>, against the central difference
// (L(p + e v) - L(p - e v)) / 2e of the loss itself. In fp32 with e = 1e-2 the quotient is good
// to about 1e-3 relative for these small models; a mismatch is beyond 2e-2 of |<grad, v>| + 1e-3.
// Run by every rank of an SPMD program (the dot products and the loss are collectives); rank 0
// records what it checked.
#pragma once

#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <tpx/nn/global_norm.hpp>
#include <tpx/tpx.hpp>
#include <vector>

namespace trainer_test {

struct directional_check {
  std::mutex lock;
  int checked = 0;
  std::vector<std::string> mismatches;  // "name: <grad, v> = a but the loss changes at b"

  // params: the set the loss reads (perturbed and restored); grads: its gradients;
  // loss(): the model's loss at the current params.
  template <class Params, class Loss>
  void run(const tpx::rank_context& rank, Params& params, const Params& grads, const Loss& loss) {
    const float e = 1e-2f;
    std::uint64_t seed = 77;
    params.for_each(
        [&](const std::string& name, auto& w, const auto& g) {
          auto v = w;
          const std::uint64_t s = ++seed;
          tpx::fill_with(v, [&](std::int64_t i) { return tpx::kernels::normal_at(s, i); });
          const double analytic = dot(g, v);
          const auto original = w;
          w = tpx::add(original, tpx::scale(v, e));
          const double up = loss();
          w = tpx::add(original, tpx::scale(v, -e));
          const double down = loss();
          w = original;
          const double numeric = (up - down) / (2.0 * e);
          if (rank.world_rank() != 0) return;
          std::lock_guard guard(lock);
          ++checked;
          if (!(std::abs(analytic - numeric) <= 2e-2 * std::abs(analytic) + 1e-3))
            mismatches.push_back(name + ": <grad, v> = " + std::to_string(analytic) +
                                 " but the loss changes at " + std::to_string(numeric));
        },
        grads);
  }

 private:
  template <class Tn>
  static double dot(const Tn& a, const Tn& b) {  // polarization identity, on sharded tensors
    return 0.25 * (tpx::scalar_on_host(tpx::nn::squared_norm(tpx::add(a, b))) -
                   tpx::scalar_on_host(tpx::nn::squared_norm(tpx::sub(a, b))));
  }
};

}  // namespace trainer_test

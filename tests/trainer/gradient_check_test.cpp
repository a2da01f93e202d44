// The example trainer's sharded backward pass computes the gradient of its loss: for every
// parameter tensor, the directional derivative along a random direction v, <grad, v>, matches
// the central difference (L(p + e v) - L(p - e v)) / 2e of the loss itself, on a 2x2 mesh with
// uneven shards and on the unsharded 1x1 mesh. In fp32 with e = 1e-2 the difference quotient
// is accurate to about 1e-3 relative here; the test allows 2e-2 of |<grad, v>| + 1e-3.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "trainer_test_support.hpp"

namespace {

using namespace trainer;

struct mismatch {
  std::string name;
  double analytic, numeric;
};

template <class Tn>
double dot(const Tn& a, const Tn& b) {  // via the polarization identity, on sharded tensors
  return 0.25 * (tpx::scalar_on_host(tpx::nn::squared_norm(tpx::add(a, b))) -
                 tpx::scalar_on_host(tpx::nn::squared_norm(tpx::add(a, tpx::scale(b, -1.0f)))));
}

}  // namespace

TEST_CASE("the sharded backward pass is the gradient of the loss") {
  for (const auto& values : {std::pair{1, 1}, std::pair{2, 2}}) {
    // plain variables, not bindings: clang before 16 cannot capture bindings in lambdas
    const int mx = std::get<0>(values), my = std::get<1>(values);
    options o = trainer_test::small(mx, my);
    o.model.layers = 2;
    const text_data data(o.text, o.model.context);
    std::vector<mismatch> bad;
    std::atomic<int> checked{0};
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      model_tensors p(rank, o.model), grads(rank, o.model), scratch(rank, o.model);
      initialize(p, o.model);
      model<float> net(rank, o.model);
      const auto tokens = load_batch<tpx::host_space>(rank, data, o.model, 0);
      net.forward_backward(p, tokens, grads);
      std::uint64_t seed = 77;
      p.for_each(
          [&](const std::string& name, auto& w, const auto& g) {
            auto v = w;
            const std::uint64_t s = ++seed;
            tpx::fill_with(v, [&](std::int64_t i) { return tpx::kernels::normal_at(s, i); });
            const double analytic = dot(g, v);
            const float e = 1e-2f;
            const auto original = w;
            w = tpx::add(original, tpx::scale(v, e));
            const double up = tpx::scalar_on_host(net.forward_backward(p, tokens, scratch));
            w = tpx::add(original, tpx::scale(v, -e));
            const double down = tpx::scalar_on_host(net.forward_backward(p, tokens, scratch));
            w = original;
            const double numeric = (up - down) / (2.0 * e);
            if (rank.world_rank() == 0) {
              ++checked;
              if (std::abs(analytic - numeric) > 2e-2 * std::abs(analytic) + 1e-3)
                bad.push_back({name, analytic, numeric});
            }
          },
          grads);
    });
    INFO("mesh " << mx << "x" << my);
    CHECK(checked == 2 + 3 * 2 + 2);
    for (const mismatch& m : bad)
      FAIL_CHECK(m.name << ": <grad, v> = " << m.analytic << " but the loss changes at "
                        << m.numeric);
  }
}

// The example trainer's sharded backward pass computes the gradient of its loss: for every
// parameter tensor, the directional derivative along a random direction v, <grad, v>, matches
// the central difference (L(p + e v) - L(p - e v)) / 2e of the loss itself, on a 2x2 mesh with
// uneven shards and on the unsharded 1x1 mesh (directional_check.hpp: e = 1e-2 in fp32, allowed
// 2e-2 of |<grad, v>| + 1e-3).
#include <doctest/doctest.h>

#include <string>
#include <tuple>

#include "directional_check.hpp"
#include "trainer_test_support.hpp"

TEST_CASE("the sharded backward pass is the gradient of the loss") {
  using namespace trainer;
  for (const auto& values : {std::pair{1, 1}, std::pair{2, 2}}) {
    // plain variables, not bindings: clang before 16 cannot capture bindings in lambdas
    const int mx = std::get<0>(values), my = std::get<1>(values);
    options o = trainer_test::small(mx, my);
    o.model.layers = 2;
    const text_data data(o.text, o.model.context);
    trainer_test::directional_check check;
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      model_tensors p(rank, o.model), grads(rank, o.model), scratch(rank, o.model);
      initialize(p, o.model);
      model<float> net(rank, o.model);
      const auto tokens = load_batch<tpx::host_space>(rank, data, o.model, 0);
      net.forward_backward(p, tokens, grads);
      check.run(rank, p, grads,
                [&] { return tpx::scalar_on_host(net.forward_backward(p, tokens, scratch)); });
    });
    INFO("mesh " << mx << "x" << my);
    CHECK(check.checked == 2 + 3 * 2 + 2);
    for (const std::string& m : check.mismatches) FAIL_CHECK(m);
  }
}

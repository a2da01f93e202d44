// The training step of the example trainer stages nothing: run on counting_space (a stand-in for
// the GPU's memory space that counts every byte crossing to or from the host), a step copies in
// exactly its batch of tokens and copies nothing out, except on the steps that report, which
// read two scalars (the loss and the squared gradient norm). It is the CUDA trainer's code: the
// same model, train_step and layers, instantiated on another space; and since counting_space
// computes with host_space's functions, its losses equal the host backend's bit for bit, which
// shows the stand-in runs the real step. That a device tensor's elements cannot be read from the
// host at all is checked at compile time below (for the CUDA space: tests/cuda/trainer_test.cu).
#include <doctest/doctest.h>

#include <cstdint>
#include <mutex>
#include <tuple>
#include <vector>

#include "../support/counting_space.hpp"
#include "trainer_test_support.hpp"

namespace {

using namespace trainer;
using tpx::testing::counting_space;

template <class Tn>
concept host_readable = requires(Tn& t) { t.local(); };
static_assert(host_readable<tpx::Tensor<float, B<X>, D<Y>>>);
static_assert(!host_readable<tpx::BasicTensor<counting_space, float, B<X>, D<Y>>>,
              "a device-like tensor's elements must not be readable from the host");

struct rank_traffic {
  int rank;
  int step;
  std::size_t to_host, from_host, batch_bytes;
};

// Per rank and step, the bytes staged by train_step; and rank 0's losses (read afterwards).
template <class Tc>
std::vector<rank_traffic> staged_bytes(const options& o, std::vector<float>& losses) {
  const text_data data(o.text, o.model.context);
  std::vector<rank_traffic> out;
  std::mutex lock;
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{o.mesh_x, o.mesh_y}, [&](auto& rank) {
    model_tensors<counting_space> params(rank, o.model), grads(rank, o.model), m(rank, o.model),
        v(rank, o.model);
    initialize(params, o.model);
    model<Tc, counting_space> net(rank, o.model);
    for (int step = 0; step < o.steps; ++step) {
      counting_space::reset();
      const auto result = train_step(rank, net, o, data, step, params, grads, m, v);
      const counting_space::traffic t = counting_space::counted();
      const auto batch = load_batch<tpx::host_space>(rank, data, o.model, step);
      {
        const std::lock_guard<std::mutex> guard(lock);
        out.push_back({rank.world_rank(), step, t.to_host, t.from_host,
                       batch.size() * sizeof(std::int32_t)});
      }
      const float loss = tpx::scalar_on_host(result.loss);
      if (rank.world_rank() == 0) losses.push_back(loss);
    }
  });
  return out;
}

}  // namespace

TEST_CASE("a training step copies its batch in and nothing out, on every rank") {
  for (const auto& values : {std::pair{1, 1}, std::pair{2, 2}, std::pair{1, 3}}) {
    // plain variables, not bindings: clang before 16 cannot capture bindings in lambdas
    const int mx = std::get<0>(values), my = std::get<1>(values);
    for (const bool bf16 : {false, true}) {
      options o = trainer_test::small(mx, my, /*checkpoint_every*/ 2);
      o.steps = 3;
      o.bf16 = bf16;
      std::vector<float> losses;
      const auto traffic = bf16 ? staged_bytes<tpx::bf16>(o, losses) : staged_bytes<float>(o, losses);
      REQUIRE(traffic.size() == static_cast<std::size_t>(mx * my * o.steps));
      for (const rank_traffic& t : traffic) {
        INFO("mesh " << mx << "x" << my << (bf16 ? " bf16" : " fp32") << ", rank " << t.rank
                     << ", step " << t.step);
        CHECK(t.to_host == 0);
        CHECK(t.from_host == t.batch_bytes);
        CHECK(t.batch_bytes > 0);
      }
      // The same step on the host backend: the stand-in ran the real computation.
      o.steps = 3;
      const std::vector<float> host = trainer_test::losses(o);
      CHECK(losses == host);
    }
  }
}

// tpx::recorded_step and what a recorded step is made of, on the host:
//   - the protocol, against a stand-in backend whose record() keeps the work and whose replay()
//     runs it (a CUDA graph runs what was captured; the stand-in counts calls instead): the first
//     call records and replays, later calls only replay; a backend that cannot record leaves the
//     reason in failure() and the work runs as written on every call; a rank in a world of
//     several ranks does not record; the host (no backend) runs the work as written, silently;
//   - AdamW with its step number in a scalar tensor (what a replay reads) updates the parameters
//     and moments bit for bit as with the host int, over ten steps counted by map_into;
//   - map_into and assign write into the tensor's own buffer (a replay reuses the recorded
//     addresses) and compute what map computes; they and copy_from_host refuse other extents.
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tpx/nn/adamw.hpp>
#include <tpx/spmd/recorded_step.hpp>
#include <tpx/tpx.hpp>
#include <vector>

namespace {

TPX_MESH_AXES(X);
TPX_DIMS(D);

struct stand_in_replay final : tpx::recorded_work {
  std::function<void()> work;
  int* replays;
  void replay() override {
    ++*replays;
    work();
  }
};

// A backend that records by keeping the work, or fails to with `refusal`.
struct stand_in_backend final : tpx::backend_state {
  int records = 0, replays = 0;
  std::string refusal;
  std::unique_ptr<tpx::recorded_work> record(const std::function<void()>& work) override {
    ++records;
    if (!refusal.empty()) throw std::runtime_error(refusal);
    auto r = std::make_unique<stand_in_replay>();
    r->work = work;
    r->replays = &replays;
    return r;
  }
};

}  // namespace

// A rank of a world of `world_size` with the stand-in backend, and a step that counts its runs.
struct stand_in_rank {
  explicit stand_in_rank(int world_size = 1) : rank(0, world_size, {}, {}) {
    rank.set_backend(&backend);
  }
  void call(int times) {
    auto work = [this] { ++runs; };
    for (int i = 0; i < times; ++i) step(rank, work);
  }
  stand_in_backend backend;
  tpx::rank_context rank;
  tpx::recorded_step step;
  int runs = 0;
};

TEST_CASE("recorded_step: recorded at the first call, replayed at every call") {
  stand_in_rank r;
  r.call(5);
  CHECK(r.step.recorded());
  CHECK(r.step.failure().empty());
  CHECK(r.backend.records == 1);
  CHECK(r.backend.replays == 5);
  CHECK(r.runs == 5);  // each through a replay
}

TEST_CASE("recorded_step: a backend that cannot record leaves the reason and runs the work") {
  stand_in_rank r;
  r.backend.refusal = "cudaErrorStreamCaptureUnsupported: operation not permitted when capturing";
  r.call(3);
  CHECK_FALSE(r.step.recorded());
  CHECK(r.step.failure() == r.backend.refusal);
  CHECK(r.backend.records == 1);  // not tried again
  CHECK(r.backend.replays == 0);
  CHECK(r.runs == 3);
}

TEST_CASE("recorded_step: a rank with others in its world does not record") {
  stand_in_rank r(4);
  r.call(2);
  CHECK_FALSE(r.step.recorded());
  CHECK(r.step.failure().find("this world has 4 ranks") != std::string::npos);
  CHECK(r.backend.records == 0);
  CHECK(r.runs == 2);
}

TEST_CASE("recorded_step: the host records nothing and says nothing") {
  const tpx::rank_context rank(0, 1, {}, {});
  tpx::recorded_step step;
  int runs = 0;
  auto work = [&] { ++runs; };
  step(rank, work);
  step(rank, work);
  CHECK_FALSE(step.recorded());
  CHECK(step.failure().empty());
  CHECK(runs == 2);
}

TEST_CASE("adamw_step: the step number as a scalar tensor updates as the int does, bit for bit") {
  tpx::spmd(tpx::host, tpx::Mesh<X>{2}, [](auto& rank) {
    using Param = tpx::Tensor<float, D<X>>;
    const auto filled = [&](std::uint64_t seed, float scale) {
      Param p(rank, {D(37)});
      tpx::fill_with(p, [&](std::int64_t i) {
        return scale * tpx::kernels::normal_at(seed, static_cast<std::uint64_t>(i));
      });
      return p;
    };
    Param p_int = filled(1, 1.0f), m_int(rank, {D(37)}), v_int(rank, {D(37)});
    Param p_tensor = filled(1, 1.0f), m_tensor(rank, {D(37)}), v_tensor(rank, {D(37)});
    tpx::Tensor<float> scale(rank, {}), t(rank, {});
    scale.local()[0] = 0.75f;
    t.local()[0] = 1.0f;
    const float* t_buffer = t.data();
    const tpx::nn::adamw_config c{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int step = 1; step <= 10; ++step) {
      const Param g = filled(100 + step, 0.5f);
      tpx::nn::adamw_step(p_int, g, m_int, v_int, c, step, scale);
      tpx::nn::adamw_step(p_tensor, g, m_tensor, v_tensor, c, t, scale);
      tpx::map_into(t, tpx::kernels::add_scalar{1.0f}, t);
    }
    CHECK(t.data() == t_buffer);
    CHECK(t.local()[0] == 11.0f);
    const auto same_bits = [](const Param& a, const Param& b) {
      return std::vector<float>(a.local().begin(), a.local().end()) ==
             std::vector<float>(b.local().begin(), b.local().end());
    };
    CHECK(same_bits(p_int, p_tensor));
    CHECK(same_bits(m_int, m_tensor));
    CHECK(same_bits(v_int, v_tensor));
  });
}

TEST_CASE("map_into and assign write into the tensor's own buffer what map computes") {
  tpx::spmd(tpx::host, tpx::Mesh<X>{3}, [](auto& rank) {
    using Vec = tpx::Tensor<float, D<X>>;
    Vec a(rank, {D(10)}), b(rank, {D(10)}), out(rank, {D(10)});
    tpx::fill_with(a, [](std::int64_t i) { return 0.5f * static_cast<float>(i) - 2.0f; });
    tpx::fill_with(b, [](std::int64_t i) { return static_cast<float>(i * i) / 7.0f; });
    const float* buffer = out.data();
    tpx::map_into(out, tpx::kernels::add{}, a, b);
    const Vec want = tpx::map(tpx::kernels::add{}, a, b);
    CHECK(out.data() == buffer);
    for (std::size_t i = 0; i < out.local().size(); ++i) CHECK(out.local()[i] == want.local()[i]);
    tpx::assign(out, a);
    CHECK(out.data() == buffer);
    for (std::size_t i = 0; i < out.local().size(); ++i) CHECK(out.local()[i] == a.local()[i]);
    Vec longer(rank, {D(11)});
    CHECK_THROWS_WITH_AS(tpx::assign(longer, a),
                         "tpx: map_into on [D_X]: an operand's extents differ from the output's",
                         std::invalid_argument);
    CHECK_THROWS_AS(tpx::copy_from_host(longer, a), std::invalid_argument);
  });
}

// The host stand-in for a CUDA graph (tests/support/replay_tape.hpp, recording_space.hpp) behaves
// as stream capture does, so that what the trainer tests prove with it about a recorded step holds
// for the graph:
//   - recording runs nothing, and each replay runs what was recorded, buffers made and freed
//     inside the work included (x <- 2x + 1 three times equals the loop on the host);
//   - a buffer made zero inside the work is zeroed again at every replay, as a memset node is;
//   - a host value the work reads when it is recorded is frozen there: replays do not see it
//     change (the hazard of replaying a step that passes its step number by value);
//   - the rules of spmd/recorded_work.hpp break the recording, with what broke them: freeing a
//     buffer made before the work, leaving one it made alive, crossing to or from the host. The
//     step then runs as written, as on a GPU.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <tpx/spmd/recorded_step.hpp>
#include <tpx/tpx.hpp>
#include <vector>

#include "../support/recording_space.hpp"

namespace {

TPX_MESH_AXES(X);
TPX_DIMS(D);

using tpx::testing::recording_space;
using Vec = tpx::BasicTensor<recording_space, float, D<X>>;
using HostVec = tpx::Tensor<float, D<X>>;

constexpr int n = 10;

// Runs fn(rank) on a rank alone in its world whose backend records on tapes.
template <class Fn>
void on_recording_rank(Fn fn) {
  tpx::spmd(tpx::host, tpx::Mesh<X>{1}, [&](auto& host_rank) {
    tpx::testing::recording_rank r(host_rank.axes());
    fn(r);
  });
}

HostVec start(const tpx::rank_context& rank) {
  HostVec h(rank, {D(n)});
  tpx::fill_with(h, [](std::int64_t i) { return 0.25f * static_cast<float>(i) - 1.0f; });
  return h;
}

Vec on_rank(const tpx::rank_context& rank, const HostVec& h) {
  Vec x(rank, {D(n)});
  tpx::copy_from_host(x, h);
  return x;
}

std::vector<float> values(const Vec& x) {
  const auto h = tpx::on_host(x);
  return {h.local().begin(), h.local().end()};
}

}  // namespace

TEST_CASE("replay_tape: recording runs nothing; each replay runs the recorded work") {
  on_recording_rank([](tpx::testing::recording_rank& r) {
    const HostVec h = start(r.rank);
    Vec x = on_rank(r.rank, h);
    auto work = [&] {
      const Vec doubled = tpx::map(tpx::kernels::add{}, x, x);  // made and freed inside
      tpx::map_into(x, tpx::kernels::add_scalar{1.0f}, doubled);
    };
    const std::unique_ptr<tpx::recorded_work> recording = r.backend.record(work);
    CHECK(values(x) == std::vector<float>(h.local().begin(), h.local().end()));
    CHECK(r.backend.operations() >= 2);
    for (int i = 0; i < 3; ++i) recording->replay();
    CHECK(r.backend.replays() == 3);
    const std::vector<float> got = values(x);
    for (int i = 0; i < n; ++i) {
      float want = h.local()[i];
      for (int k = 0; k < 3; ++k) want = (want + want) + 1.0f;
      CHECK(got[i] == want);
    }
  });
}

TEST_CASE("replay_tape: a buffer made zero inside the work is zeroed again at every replay") {
  on_recording_rank([](tpx::testing::recording_rank& r) {
    const HostVec h = start(r.rank);
    Vec x = on_rank(r.rank, h);
    tpx::recorded_step step;
    auto work = [&] {
      Vec sum(r.rank, {D(n)});  // zeros
      tpx::map_into(sum, tpx::kernels::add{}, sum, x);
      tpx::assign(x, sum);
    };
    for (int i = 0; i < 3; ++i) step(r.rank, work);
    REQUIRE(step.recorded());
    CHECK(values(x) == std::vector<float>(h.local().begin(), h.local().end()));
  });
}

TEST_CASE("replay_tape: a host value read when the work is recorded is frozen in the replays") {
  on_recording_rank([](tpx::testing::recording_rank& r) {
    const HostVec h = start(r.rank);
    Vec x = on_rank(r.rank, h);
    tpx::recorded_step step;
    float increment = 0;
    auto work = [&] { tpx::map_into(x, tpx::kernels::add_scalar{increment}, x); };
    for (int call = 1; call <= 4; ++call) {
      increment = static_cast<float>(call);  // as written: + 1 + 2 + 3 + 4
      step(r.rank, work);
    }
    REQUIRE(step.recorded());
    const std::vector<float> got = values(x);
    for (int i = 0; i < n; ++i) CHECK(got[i] == h.local()[i] + 4.0f);  // + 1, four times
  });
}

TEST_CASE("replay_tape: work that breaks a rule of recorded_work is not recorded, and says why") {
  on_recording_rank([](tpx::testing::recording_rank& r) {
    const HostVec h = start(r.rank);
    const auto failure_of = [&](auto work) {
      tpx::recorded_step step;
      step(r.rank, work);
      CHECK_FALSE(step.recorded());
      return step.failure();
    };
    const std::string bytes = std::to_string(n * sizeof(float)) + " bytes";
    const std::string rules = " (the rules of a recorded step: spmd/recorded_work.hpp)";

    std::optional<Vec> made_before(on_rank(r.rank, h));
    CHECK(failure_of([&] { made_before.reset(); }) ==
          "tpx: the recorded work frees 1 buffer (" + bytes +
              ") made before it, which every replay would free again" + rules);

    const Vec x = on_rank(r.rank, h);
    std::optional<Vec> kept;
    CHECK(failure_of([&] { kept.emplace(tpx::map(tpx::kernels::add{}, x, x)); }) ==
          "tpx: the recorded work leaves 1 buffer (" + bytes +
              ") it made alive after it, which the next replay would make again" + rules);
    // Unrecorded, the work ran as written: kept holds 2x.
    REQUIRE(kept.has_value());
    const std::vector<float> doubled = values(*kept);
    for (int i = 0; i < n; ++i) CHECK(doubled[i] == h.local()[i] + h.local()[i]);

    CHECK(failure_of([&] { (void)tpx::on_host(x); }) ==
          "recording_space: rank 0: a step being recorded reads " + bytes + " on the host");
    Vec y = on_rank(r.rank, h);
    CHECK(failure_of([&] { tpx::copy_from_host(y, h); }) ==
          "recording_space: rank 0: a step being recorded copies " + bytes + " from the host");
  });
}

// The CUDA meshes: the simulated one (spmd(tpx::cuda_simulated, ...): many ranks as threads on
// one GPU) and NCCL (spmd(tpx::cuda_devices, ...): one GPU per rank), in one executable so that
// the templates both instantiate compile once. CTest runs it twice (tests/cuda/CMakeLists.txt):
// cuda_simulated_mesh_test runs the cases named "simulated mesh" (1 GPU), cuda_nccl_test those
// named "NCCL" (at least 2 GPUs, else it reports itself skipped).
//
// On each mesh: every collective against host-computed values (support/collective_cases.hpp;
// all_reduce both as a sum and as a maximum), the typed program of the core issue against the
// host launcher (support/typed_program.hpp), and a pipeline of stages over P in every schedule,
// with and without tensor parallelism inside the stages, against the host's
// (support/pipeline_program.hpp). On the simulated mesh also all_reduce max's
// NaN propagation (as the host's; NCCL's max drops NaN, so it is not asked there) and failures:
// a rank that throws stops the others at once, a collective only rank 0 calls fails as soon as
// the others return (not at the timeout), and ranks calling different collectives (a sum
// against a maximum included) are told so. Over NCCL also point-to-point send and recv, on 2 up
// to 8 ranks (as many as there are GPUs), and checked collectives (launch_options::
// check_collectives, TPX_CHECK_COLLECTIVES=1): ranks calling different collectives, or one that
// returns while its peer waits in a collective, or a send whose recv takes fewer elements, or
// ranks waiting in each other's collectives (a cycle, found by the process's watchdog), fail
// every rank at once with a sentence naming the world ranks (the deviating ones with their
// host), the calls and the collective's number (written out from each test's program);
// unchecked, the timeout's message says how to turn the check on. The cases named "torchrun"
// (cuda_nccl_launch_test, one GPU) join NCCL as a process of a torchrun launch of world size 1
// (cuda/nccl_launch.hpp; with one process the TCP rendezvous has nobody to hand the id to:
// tests/unit/rendezvous_test.cpp exercises it between processes) and check a world size that is
// not the mesh's. On both meshes, background tasks (tpx::in_background on a rank's second stream)
// equal the rank's own collectives while the rank's kernels reuse the pool's memory beside them.
// On a rank alone on the simulated mesh, a step recorded as a CUDA graph (tpx::recorded_step)
// that frees a buffer made before it, or leaves one it made alive, is refused with the rule it
// broke (spmd/recording_ledger.hpp, as the host stand-in for a graph shows in
// tests/unit/replay_tape_test.cpp) and runs as written instead; one that keeps the rules replays.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <tpx/cuda/cuda.hpp>
#include <tpx/launch/this_host.hpp>
#include <tpx/spmd/background.hpp>
#include <tpx/spmd/recorded_step.hpp>
#include <tpx/tensor/staging.hpp>

#include "support/collective_cases.hpp"
#include "support/pipeline_program.hpp"
#include "support/typed_program.hpp"

namespace {
namespace t = tpx::cuda::testing;
}

TEST_CASE("simulated mesh: every collective equals the host's result") {
  for (int ranks : {1, 2, 3, 4, 5}) t::check_collectives(tpx::cuda_simulated, ranks);
}

TEST_CASE("simulated mesh: the typed program equals the host launcher's") {
  t::check_typed_program(tpx::cuda_simulated, 1, 1);
  t::check_typed_program(tpx::cuda_simulated, 2, 1);
  t::check_typed_program(tpx::cuda_simulated, 2, 2);
  t::check_typed_program(tpx::cuda_simulated, 3, 2);
}

TEST_CASE("simulated mesh: a pipeline over P equals the host launcher's in every schedule") {
  t::pipeline_case::check_pipeline_program(tpx::cuda_simulated, 1, 1);
  t::pipeline_case::check_pipeline_program(tpx::cuda_simulated, 3, 1);
  t::pipeline_case::check_pipeline_program(tpx::cuda_simulated, 2, 2);
}

TEST_CASE("simulated mesh: pipeline, FSDP and tensor parallelism at once equal the host's") {
  t::pipeline_3d_case::check_3d_pipeline_program(tpx::cuda_simulated, 2, 1, 2);
  t::pipeline_3d_case::check_3d_pipeline_program(tpx::cuda_simulated, 2, 2, 2);
}

TEST_CASE("simulated mesh: a failing rank fails the run, naming it, and nobody waits for it") {
  tpx::cuda::launch_options quick;
  quick.timeout = std::chrono::seconds(20);
  const auto start = std::chrono::steady_clock::now();
  try {
    tpx::spmd(
        tpx::cuda_simulated, tpx::Mesh<t::R>{3},
        [](auto& rank) {
          if (rank.world_rank() == 1) throw std::runtime_error("rank one gives up");
          auto x = tpx::zeros<float, t::B<t::R>>(rank, {t::B(6)});
          (void)tpx::all_gather<t::R>(x);
        },
        quick);
    FAIL("spmd returned normally");
  } catch (const tpx::spmd_error& e) {
    CHECK(e.rank() == 1);
    CHECK(std::string(e.what()).find("rank one gives up") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("simulated mesh: a collective only rank 0 calls fails when the others return") {
  const auto start = std::chrono::steady_clock::now();
  try {
    // The default timeout: 5 minutes.
    tpx::spmd(tpx::cuda_simulated, tpx::Mesh<t::R>{3}, [](auto& rank) {
      auto x = tpx::zeros<float, t::B<t::R>>(rank, {t::B(6)});
      if (rank.world_rank() == 0) (void)tpx::to_global(x);
    });
    FAIL("spmd returned normally");
  } catch (const tpx::spmd_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.rank() == 0);
    CHECK(what.find("collective #1 on group {0,1,2} (mesh axis R), all_gather<float> of 6 "
                    "elements, can never complete: world ranks {0} joined it but {") !=
          std::string::npos);
    CHECK(what.find("returned without joining it") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("simulated mesh: ranks calling different collectives get a comm_error saying which") {
  CHECK_THROWS_WITH_AS(tpx::spmd(tpx::cuda_simulated, tpx::Mesh<t::R>{2},
                                 [](auto& rank) {
                                   tpx::any_communicator& comm = rank.template group<t::R>();
                                   auto buffer = tpx::cuda::device_space::make_buffer<float>(rank, 4);
                                   const std::span<float> data(buffer.data(), buffer.size());
                                   if (rank.world_rank() == 0)
                                     comm.all_reduce(std::span<const float>(data), data);
                                   else
                                     comm.broadcast(std::span<const float>(data), data, 0);
                                 }),
                       doctest::Contains("mismatched collectives"), tpx::spmd_error);
}

TEST_CASE("simulated mesh: all_reduce max returns NaN where any rank's input is NaN") {
  // Element 0 is NaN on rank 1 only, element 1 on every rank, element 2 nowhere.
  std::atomic<int> wrong{0};
  tpx::spmd(tpx::cuda_simulated, tpx::Mesh<t::R>{3}, [&](auto& rank) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const int me = rank.world_rank();
    const std::vector<float> host = {me == 1 ? nan : 1.0f, nan, static_cast<float>(me)};
    auto buffer = tpx::cuda::device_space::make_buffer<float>(rank, host.size());
    tpx::cuda::device_space::from_host(rank, host.data(), host.size(), buffer.data());
    const std::span<float> data(buffer.data(), buffer.size());
    rank.template group<t::R>().all_reduce(std::span<const float>(data), data, tpx::reduction::max);
    std::vector<float> got(host.size());
    tpx::cuda::device_space::to_host(rank, buffer.data(), got.size(), got.data());
    wrong += !std::isnan(got[0]) + !std::isnan(got[1]) + (got[2] != 2.0f);
  });
  CHECK(wrong.load() == 0);
}

TEST_CASE("simulated mesh: an all_reduce sum against an all_reduce max is a mismatch naming both") {
  CHECK_THROWS_WITH_AS(tpx::spmd(tpx::cuda_simulated, tpx::Mesh<t::R>{2},
                                 [](auto& rank) {
                                   tpx::any_communicator& comm = rank.template group<t::R>();
                                   auto buffer = tpx::cuda::device_space::make_buffer<float>(rank, 4);
                                   const std::span<float> data(buffer.data(), buffer.size());
                                   if (rank.world_rank() == 0)
                                     comm.all_reduce(std::span<const float>(data), data);
                                   else
                                     comm.all_reduce(std::span<const float>(data), data, tpx::reduction::max);
                                 }),
                       doctest::Contains("the calls are tied, none made by more ranks than the others: world "
                                         "rank 0 called all_reduce<float> of 4 elements, world rank 1 called "
                                         "all_reduce(max)<float> of 4 elements"),
                       tpx::spmd_error);
}

TEST_CASE("NCCL: every collective equals the host's result") {
  const int gpus = std::min(tpx::cuda::device_count(), 8);
  for (int ranks = 2; ranks <= gpus; ++ranks) t::check_collectives(tpx::cuda_devices, ranks);
}

TEST_CASE("NCCL: send and recv move a buffer between two ranks") {
  std::atomic<int> wrong{0};
  tpx::spmd(tpx::cuda_devices, tpx::Mesh<t::R>{2}, [&](auto& rank) {
    tpx::cuda::NcclCommunicator& nccl = tpx::cuda::nccl_of(rank.template group<t::R>());
    std::vector<float> host(1000);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i);
    auto buffer = tpx::cuda::device_space::make_buffer<float>(rank, host.size());
    if (rank.world_rank() == 0) {
      tpx::cuda::device_space::from_host(rank, host.data(), host.size(), buffer.data());
      nccl.send(std::span<const float>(buffer.data(), buffer.size()), 1);
    } else {
      nccl.recv(std::span<float>(buffer.data(), buffer.size()), 0);
      std::vector<float> got(host.size());
      tpx::cuda::device_space::to_host(rank, buffer.data(), got.size(), got.data());
      wrong += got != host;
    }
  });
  CHECK(wrong.load() == 0);
}

namespace {
// Background tasks on a CUDA rank's lane (rank_resources.hpp; tpx::in_background). Per round each
// rank starts three tasks: a gather over X of a bf16 cast (a temporary the task frees while the
// gather may still read it), a gather over Y, and a reduce-scatter over X of a partial product
// moved into the task (freed by it). Then, before it takes the results, it queues work of its own
// that allocates, writes and frees blocks of the temporaries' sizes, which the pool would hand
// out if the task's memory were freed before its collectives had read it. The results must equal
// the same collectives on the rank's own stream bit for bit, and the gathers the unsharded
// tensors.
template <class Launcher>
void check_background_equals_own(Launcher launcher, int x, int y) {
  using namespace tpx;
  using t::B, t::D, t::F, t::X, t::Y;
  std::mutex m;
  std::vector<std::string> wrong;
  const auto floats = [](const auto& tensor) {
    const auto global = to_global(tensor);
    return std::vector<float>(global.begin(), global.end());
  };
  spmd(launcher, Mesh<X, Y>{x, y}, [&](auto& rank) {
    const auto note = [&](const std::string& what) {
      std::lock_guard lock(m);
      wrong.push_back("rank " + std::to_string(rank.world_rank()) + ": " + what);
    };
    for (std::uint64_t round = 0; round < 20; ++round) {
      const auto a = randn<float, B<>, D<X>>(rank, {B(96), D(160)}, 10 + round);
      const auto b = randn<float, D<X>, F<>>(rank, {D(160), F(112)}, 20 + round);
      const auto c = randn<float, B<Y>, F<>>(rank, {B(96), F(112)}, 30 + round);
      auto a_bg = in_background(rank, [&] { return all_gather<X>(cast<bf16>(a)); });
      auto c_bg = in_background(rank, [&] { return all_gather<Y>(c); });
      auto rs_bg = in_background(rank, [&, partial = matmul(a, b)] { return reduce_scatter<X, F>(partial); });
      for (std::uint64_t i = 0; i < 8; ++i) {
        (void)cast<bf16>(randn<float, B<>, D<X>>(rank, {B(96), D(160)}, 100 + i));
        (void)randn<float, B<>, F<>>(rank, {B(96), F(112)}, 200 + i);
      }
      const auto a_fg = all_gather<X>(cast<bf16>(a));
      const auto c_fg = all_gather<Y>(c);
      const auto rs_fg = reduce_scatter<X, F>(matmul(a, b));
      const std::vector<float> a_own = floats(a_fg), c_own = floats(c_fg), rs_own = floats(rs_fg);
      if (floats(a_bg.get()) != a_own) note("the background gather over X differs from the rank's own");
      if (floats(c_bg.get()) != c_own) note("the background gather over Y differs from the rank's own");
      if (floats(rs_bg.get()) != rs_own) note("the background reduce-scatter differs from the rank's own");
      if (a_own != floats(cast<bf16>(randn<float, B<>, D<>>(rank, {B(96), D(160)}, 10 + round))) ||
          c_own != floats(randn<float, B<>, F<>>(rank, {B(96), F(112)}, 30 + round)))
        note("a gather differs from the unsharded tensor");
    }
  });
  for (const std::string& w : wrong) FAIL_CHECK(w);
}
}  // namespace

TEST_CASE("simulated mesh: background tasks on each rank's lane equal the rank's own collectives") {
  check_background_equals_own(tpx::cuda_simulated, 2, 2);
  check_background_equals_own(tpx::cuda_simulated, 1, 1);
}

TEST_CASE("simulated mesh: a recorded step that breaks a memory rule is refused, saying which") {
  tpx::spmd(tpx::cuda_simulated, tpx::Mesh<t::X>{1}, [](auto& rank) {
    using Vec = tpx::BasicTensor<tpx::space_of_t<decltype(rank)>, float, t::D<t::X>>;
    const auto filled = [&] {
      tpx::Tensor<float, t::D<t::X>> h(rank, {t::D(10)});
      tpx::fill_with(h, [](std::int64_t i) { return static_cast<float>(i); });
      Vec x(rank, {t::D(10)});
      tpx::copy_from_host(x, h);
      return x;
    };
    const auto failure_of = [&](auto work) {
      tpx::recorded_step step;
      step(rank, work);
      CHECK_FALSE(step.recorded());
      return step.failure();
    };
    std::optional<Vec> made_before(filled());
    CHECK(failure_of([&] { made_before.reset(); }).find("frees 1 buffer (40 bytes) made before it") !=
          std::string::npos);
    const Vec x = filled();
    std::optional<Vec> kept;
    CHECK(failure_of([&] { kept.emplace(tpx::map(tpx::kernels::add{}, x, x)); })
              .find("leaves 1 buffer (40 bytes) it made alive after it") != std::string::npos);
    REQUIRE(kept.has_value());  // made by the unrecorded run
    CHECK(tpx::to_global(*kept)[9] == 18.0f);

    Vec y = filled();
    tpx::recorded_step step;
    auto doubled = [&] {
      const Vec sum = tpx::map(tpx::kernels::add{}, y, y);
      tpx::assign(y, sum);
    };
    for (int i = 0; i < 3; ++i) step(rank, doubled);
    INFO(step.failure());
    CHECK(step.recorded());
    CHECK(tpx::to_global(y)[9] == 72.0f);
  });
}

TEST_CASE("NCCL: background tasks on each rank's lane equal the rank's own collectives") {
  check_background_equals_own(tpx::cuda_devices, 2, 1);
  if (tpx::cuda::device_count() >= 4) check_background_equals_own(tpx::cuda_devices, 2, 2);
}

TEST_CASE("NCCL: a pipeline over P equals the host launcher's in every schedule") {
  t::pipeline_case::check_pipeline_program(tpx::cuda_devices, 2, 1);
  if (tpx::cuda::device_count() >= 4)
    t::pipeline_3d_case::check_3d_pipeline_program(tpx::cuda_devices, 2, 1, 2);
}

TEST_CASE("NCCL: the typed program equals the host launcher's") {
  t::check_typed_program(tpx::cuda_devices, 2, 1);
  if (tpx::cuda::device_count() >= 4) t::check_typed_program(tpx::cuda_devices, 2, 2);
}

namespace {
using namespace std::chrono_literals;

// How spmd(tpx::cuda_devices, mesh, fn, options) failed on a mesh of 2 ranks (Mesh<R>{2} unless
// given): what each rank's fn threw ("" if it returned), what spmd threw (it must throw
// spmd_error), and how long the run took.
struct nccl_failures {
  std::vector<std::string> thrown = std::vector<std::string>(2);
  std::string spmd;
  std::chrono::steady_clock::duration took{};
};
template <class Fn, class MeshT = tpx::Mesh<t::R>>
nccl_failures run_failing_nccl(Fn fn, const tpx::cuda::launch_options& options,
                               const MeshT& mesh = MeshT{2}) {
  nccl_failures failures;
  const auto start = std::chrono::steady_clock::now();
  try {
    tpx::spmd(
        tpx::cuda_devices, mesh,
        [&](auto& rank) {
          try {
            fn(rank);
          } catch (const std::exception& e) {
            failures.thrown[static_cast<std::size_t>(rank.world_rank())] = e.what();
            throw;
          }
        },
        options);
    FAIL("spmd returned");
  } catch (const tpx::spmd_error& e) {
    failures.spmd = e.what();
  }
  failures.took = std::chrono::steady_clock::now() - start;
  return failures;
}

// Both ranks all-reduce 4 floats on the world (collective #1), then call `second(world rank,
// world, 8 floats)`.
template <class Rank, class Second>
void agree_then(Rank& rank, Second second) {
  tpx::any_communicator& world = rank.template group<t::R>();
  auto buffer = tpx::cuda::device_space::make_buffer<float>(rank, 8);
  const std::span<float> four(buffer.data(), 4);
  world.all_reduce(std::span<const float>(four), four);
  second(rank.world_rank(), world, std::span<float>(buffer.data(), buffer.size()));
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Both ranks, and spmd, failed with `message`, within 10 s.
void check_both_fail_at_once(const nccl_failures& failures, const std::string& message) {
  for (const std::string& what : failures.thrown) CHECK_MESSAGE(contains(what, message), what);
  CHECK_MESSAGE(contains(failures.spmd, message), failures.spmd);
  CHECK(failures.took < 10s);
}
}  // namespace

TEST_CASE("NCCL: checked, ranks calling different collectives all fail at once, naming both calls") {
  // Collective #2: rank 0 all-reduces 4 floats, rank 1 gathers 4 from each rank.
  const auto failures = run_failing_nccl(
      [](auto& rank) {
        agree_then(rank, [](int r, tpx::any_communicator& world, std::span<float> data) {
          const std::vector<std::size_t> counts{4, 4};
          if (r == 0)
            world.all_reduce(std::span<const float>(data.first(4)), data.first(4));
          else
            world.all_gather(std::span<const float>(data.first(4)), data, counts);
        });
      },
      {.timeout = 60s, .check_collectives = true});
  const std::string mismatch =
      "tpx: mismatched collectives on group {0,1} (mesh axis R) at collective #2: world rank 0 called "
      "all_reduce<float> of 4 elements but world rank 1 (host " +
      tpx::this_host() + ") called all_gather<float> of 8 elements";
  check_both_fail_at_once(failures, mismatch);
}

TEST_CASE("NCCL: checked, a send and a recv of different sizes fail both ranks at once, naming both") {
  // Point-to-point call #1 between the two ranks: rank 0 sends 8 floats, rank 1 receives 4.
  const auto failures = run_failing_nccl(
      [](auto& rank) {
        agree_then(rank, [](int r, tpx::any_communicator& world, std::span<float> data) {
          tpx::cuda::NcclCommunicator& nccl = tpx::cuda::nccl_of(world);
          if (r == 0)
            nccl.send(std::span<const float>(data), 1);
          else
            nccl.recv(data.first(4), 0);
        });
      },
      {.timeout = 60s, .check_collectives = true});
  const std::string mismatch =
      "tpx: mismatched point-to-point calls on group {0,1} (mesh axis R) at call #1 between world ranks 0 and 1: "
      "world rank 0 called send<float> of 8 elements to rank 1 but world rank 1 (host " +
      tpx::this_host() + ") called recv<float> of 4 elements from rank 0";
  check_both_fail_at_once(failures, mismatch);
}

TEST_CASE("NCCL: checked, a rank that returns fails its peer's collective at once, naming both") {
  // Collective #2: rank 0 all-reduces 4 floats; rank 1 has returned (and fails after its fn).
  const auto failures = run_failing_nccl(
      [](auto& rank) {
        agree_then(rank, [](int r, tpx::any_communicator& world, std::span<float> data) {
          if (r == 0) world.all_reduce(std::span<const float>(data.first(4)), data.first(4));
        });
      },
      {.timeout = 60s, .check_collectives = true});
  const std::string never =
      "tpx: collective #2 on group {0,1} (mesh axis R), all_reduce<float> of 4 elements, can never complete: "
      "world rank 0 joined it but world rank 1 (host " +
      tpx::this_host() +
      ") returned without joining it. Is a collective inside rank-dependent control flow, e.g. "
      "`if (rank.world_rank() == 0)`?";
  CHECK_MESSAGE(contains(failures.thrown[0], never), failures.thrown[0]);
  CHECK_MESSAGE(contains(failures.spmd, never), failures.spmd);
  CHECK(failures.took < 10s);
}

TEST_CASE("NCCL: checked, ranks in a cycle across groups fail at once with the picture") {
  // Mesh 1x2, whose groups of Y and of both axes each hold ranks 0 and 1 (X's groups are single
  // ranks, unchecked): rank 0 all-reduces over Y, then over the world; rank 1 the other way round.
  // Each waits in collective #1 of a group the other has not called: only the process's
  // watchdog (comm/in_process_watchdog.hpp) can see it.
  const auto failures = run_failing_nccl(
      [](auto& rank) {
        auto buffer = tpx::cuda::device_space::make_buffer<float>(rank, 8);
        const std::span<float> data(buffer.data(), buffer.size());
        tpx::any_communicator& over_y = rank.template group<t::Y>();
        tpx::any_communicator& world = rank.template group<t::X, t::Y>();
        if (rank.world_rank() == 0) over_y.all_reduce(std::span<const float>(data), data);
        world.all_reduce(std::span<const float>(data), data);
        if (rank.world_rank() != 0) over_y.all_reduce(std::span<const float>(data), data);
      },
      {.timeout = 60s, .check_collectives = true}, tpx::Mesh<t::X, t::Y>{1, 2});
  const std::string host = " (host " + tpx::this_host() + ")";
  const std::string picture =
      "world rank 0 waits in collective #1 on group {0,1} (mesh axis Y), all_reduce<float> of 8 "
      "elements, which world rank 1" +
      host +
      " has not called; world rank 1 waits in collective #1 on group {0,1} (mesh axes X, Y), "
      "all_reduce<float> of 8 elements, which world rank 0" +
      host + " has not called";
  check_both_fail_at_once(failures,
                          "tpx: the collectives are deadlocked, every rank waiting for another");
  check_both_fail_at_once(failures, picture);
}

TEST_CASE("NCCL: TPX_CHECK_COLLECTIVES=1 checks collectives; unchecked, the timeout says to set it") {
  // Collective #2: rank 0 broadcasts 8 floats, rank 1 all-reduces them; checked by the
  // environment alone.
  ::setenv("TPX_CHECK_COLLECTIVES", "1", 1);
  const auto checked = run_failing_nccl(
      [](auto& rank) {
        agree_then(rank, [](int r, tpx::any_communicator& world, std::span<float> data) {
          if (r == 0)
            world.broadcast(std::span<const float>(data), data, 0);
          else
            world.all_reduce(std::span<const float>(data), data);
        });
      },
      {.timeout = 60s});
  ::unsetenv("TPX_CHECK_COLLECTIVES");
  for (const std::string& what : checked.thrown)
    CHECK_MESSAGE(contains(what, "at collective #2: world rank 0 called broadcast<float> of 8 elements from rank 0 "
                                 "but world rank 1 (host " +
                                     tpx::this_host() + ") called all_reduce<float> of 8 elements"),
                  what);
  // Unchecked, rank 0's all_reduce waits for a peer that has returned, until the timeout.
  const auto unchecked = run_failing_nccl(
      [](auto& rank) {
        agree_then(rank, [](int r, tpx::any_communicator& world, std::span<float> data) {
          if (r != 0) return;
          world.all_reduce(std::span<const float>(data), data);
          tpx::cuda::nccl_of(world).wait_all();
        });
      },
      {.timeout = 1s});
  CHECK_MESSAGE(contains(unchecked.thrown[0], "did not complete within 1000 ms; set TPX_CHECK_COLLECTIVES=1 to "
                                              "find the rank that called a different collective or none"),
                unchecked.thrown[0]);
}

namespace {
void set_torchrun_variables(const char* world_size) {
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", world_size, 1);
  ::setenv("LOCAL_RANK", "0", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29531", 1);
}
void clear_torchrun_variables() {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"})
    ::unsetenv(name);
}
}  // namespace

TEST_CASE("torchrun: a launched process joins NCCL and all-reduces on its GPU") {
  set_torchrun_variables("1");
  const std::vector<float> host{1.5f, -2.0f, 3.25f};
  std::vector<float> got(host.size());
  tpx::cuda::run_launched_rank(tpx::Mesh<t::R>{1}, [&](auto& rank) {
    tpx::cuda::NcclCommunicator& nccl = tpx::cuda::nccl_of(rank.template group<t::R>());
    auto in = tpx::cuda::device_space::make_buffer<float>(rank, host.size());
    auto out = tpx::cuda::device_space::make_buffer<float>(rank, host.size());
    tpx::cuda::device_space::from_host(rank, host.data(), host.size(), in.data());
    nccl.all_reduce(std::span<const float>(in.data(), in.size()), std::span<float>(out.data(), out.size()));
    tpx::cuda::device_space::to_host(rank, out.data(), got.size(), got.data());
  });
  clear_torchrun_variables();
  CHECK(got == host);  // the sum over one rank
}

TEST_CASE("torchrun: a launch whose world size is not the mesh's fails before NCCL, naming both") {
  set_torchrun_variables("2");
  std::string message;
  try {
    tpx::cuda::run_launched_rank(tpx::Mesh<t::R>{1}, [](auto&) {});
  } catch (const std::invalid_argument& e) {
    message = e.what();
  }
  clear_torchrun_variables();
  CHECK(message.find("the torchrun launch has 2 processes but the mesh") != std::string::npos);
  CHECK(message.find("has 1 ranks") != std::string::npos);
}

// Shared by the dry-run tests (dry_run_test.cpp: the MLP, without and with pipeline stages;
// gpt_dry_run_test.cpp: the GPT): every rank's step_usage (examples/trainer/step_usage.hpp) from
// a launcher, and the check that a dry run's memory and traffic are the real run's, rank by rank,
// and so is the part of the traffic its background tasks move (the host launcher's communication
// thread's, the dry run's background communicators'); with background tasks, the memory held
// between steps but not the peak, which depends on when the communication thread runs them.
// The real run keeps host memory behind a device-like space (support/device_like_space.hpp), so
// that the layers take the GPU's paths, which the dry run's meta space takes too without the
// whole-row kernels device_like_space lacks (host_path_meta_space).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <tpx/spmd/dry_run.hpp>
#include <vector>

#include "../../examples/trainer/step_usage.hpp"
#include "../../examples/trainer/training.hpp"
#include "../support/device_like_space.hpp"

namespace dry_run_test {

// meta_space without the whole-row kernels that device_like_space (host_space's functions) lacks,
// so that both take the same paths through the layers.
struct host_path_meta_space : tpx::meta_space {
  template <class T, class W>
  static void rmsnorm_rows(const tpx::rank_context&, std::int64_t, std::int64_t, const T*, const W*,
                           float, T*, float*) = delete;
  template <class T, class W>
  static void rmsnorm_rows_backward(const tpx::rank_context&, std::int64_t, std::int64_t, const T*,
                                    const W*, const float*, const T*, T*, float*) = delete;
  template <class T>
  static void softmax_stats_rows(const tpx::rank_context&, std::int64_t, std::int64_t, const T*,
                                 float*, float*) = delete;
  template <class T>
  static void cross_entropy_gradient_rows(const tpx::rank_context&, std::int64_t, std::int64_t,
                                          const T*, const float*, const float*,
                                          tpx::kernels::token_at, std::int64_t, float, T*) = delete;
};

// Every rank's usage, in rank order, from `launcher` (tpx::host on Space device_like_space, or
// tpx::dry_run on a meta space).
template <class Space, class Family, class Launcher>
std::vector<trainer::step_usage> usage(Launcher launcher, const trainer::run_options<Family>& o) {
  const trainer::text_data data(o.text, Family::context(o.model));
  const typename Family::mesh mesh = trainer::mesh_of(o);
  std::vector<trainer::step_usage> ranks(mesh.rank_count());
  std::mutex lock;
  tpx::spmd(launcher, mesh, [&](auto& rank) {
    trainer::step_usage u = trainer::measure_step_usage<float, Space>(rank, o, data);
    const std::lock_guard<std::mutex> guard(lock);
    ranks[u.rank] = std::move(u);
  });
  return ranks;
}

// Every collective's calls and bytes over every set of axes.
inline void check_same_traffic(const std::vector<tpx::axes_traffic>& dry,
                               const std::vector<tpx::axes_traffic>& real, const char* what) {
  INFO(what);
  REQUIRE(dry.size() == real.size());
  for (std::size_t set = 0; set < real.size(); ++set) {
    INFO("axes " << real[set].axes);
    CHECK(dry[set].axes == real[set].axes);
    for (tpx::detail::CollectiveOp op : tpx::collective_traffic::operations) {
      INFO(tpx::detail::op_name(op));
      const tpx::traffic_count want = real[set].traffic.of(op), got = dry[set].traffic.of(op);
      CHECK(got.calls == want.calls);
      CHECK(got.data_bytes == want.data_bytes);
      CHECK(got.link_bytes == want.link_bytes);
    }
  }
}

// The dry run's timeline of a rank's step holds all of it: its work events add up to the step's
// products and to its traffic outside background tasks, its tasks' starts to the background
// traffic; each task starts once, is waited for once, after its start, and only with overlap.
inline void check_timeline_holds_the_step(const trainer::step_usage& u, bool overlap) {
  using kind = tpx::timeline_event::kind;
  double flops = 0, own = 0, background = 0;
  std::vector<int> started, waited;
  for (const tpx::timeline_event& e : u.timeline) {
    if (e.what == kind::work) flops += e.matrix_flops, own += tpx::link_bytes(e.traffic);
    if (e.what == kind::start) background += tpx::link_bytes(e.traffic), started.push_back(e.task);
    if (e.what == kind::wait) {
      CHECK(std::find(started.begin(), started.end(), e.task) != started.end());
      waited.push_back(e.task);
    }
  }
  CHECK(flops == doctest::Approx(u.matrix_flops).epsilon(1e-12));
  CHECK(background == doctest::Approx(tpx::link_bytes(u.background_traffic)).epsilon(1e-12));
  CHECK(own + background == doctest::Approx(tpx::link_bytes(u.traffic)).epsilon(1e-12));
  std::sort(waited.begin(), waited.end());
  CHECK(waited == started);  // started in order 0, 1, ...: sorted already
  if (!overlap) CHECK(started.empty());
}

template <class Family>
void check_dry_run_reads_the_real_run(const trainer::run_options<Family>& o,
                                      const std::string& what) {
  const auto real = usage<tpx::testing::device_like_space>(tpx::host, o);
  const auto dry = usage<host_path_meta_space>(tpx::dry_run, o);
  const bool overlap = o.model.overlap;
  REQUIRE(real.size() == dry.size());
  for (std::size_t r = 0; r < real.size(); ++r) {
    INFO(what << ", rank " << r);
    CHECK(dry[r].state_bytes == real[r].state_bytes);
    // With background tasks a real run's peak depends on when its communication thread runs
    // them, which the dry run does at once: not the program's to fix, so not compared.
    if (!overlap) CHECK(dry[r].peak_bytes == real[r].peak_bytes);
    CHECK(dry[r].peak_bytes > dry[r].state_bytes);
    check_same_traffic(dry[r].traffic, real[r].traffic, "all traffic");
    check_same_traffic(dry[r].background_traffic, real[r].background_traffic,
                       "background tasks' traffic");
    check_timeline_holds_the_step(dry[r], overlap);
  }
  // Something moved, where the mesh has more than one rank; in the background only with overlap.
  if (real.size() > 1) CHECK(tpx::link_bytes(real[0].traffic) > 0);
  if (!overlap) CHECK(tpx::link_bytes(real[0].background_traffic) == 0);
}

inline double total_flops(const std::vector<trainer::step_usage>& ranks) {
  double flops = 0;
  for (const trainer::step_usage& u : ranks) flops += u.matrix_flops;
  return flops;
}

}  // namespace dry_run_test

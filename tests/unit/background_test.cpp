// tpx::in_background on the host launcher (spmd/background.hpp, spmd/communication_thread.hpp):
//  - typed collectives run on a rank's communication thread give the same bits as the same
//    collectives on the rank's own thread, which runs its own at the same time, and equal the
//    unsharded reference (gathers exactly, a reduce-scatter within 1e-5);
//  - every failure reaches every rank within seconds, not at the time-out, naming the rank and,
//    where a collective failed, the collective and the thread: a task that throws, mismatched
//    background collectives, a rank that throws while its background gather waits for a peer
//    that waits for it, a background collective that a returned rank never started, and a task
//    whose result was dropped unread;
//  - destroying a pending result waits for its task; a task started on the communication
//    thread, or on a rank without one, runs at once on the calling thread;
//  - on a backend with a background lane (CUDA's second stream; here a recording stand-in) a task
//    runs at once between the lane's enter and leave, get() waits on the lane's join before it
//    returns the result, a dropped result is joined before it is destroyed, a task that throws
//    leaves the lane and is joined, and a task started inside a task stays on the lane;
//  - the time a rank waits counts as exposed only while a task runs, so exposed <= total.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tpx/spmd/background.hpp>
#include <tpx/tpx.hpp>
#include <utility>
#include <vector>

#include "../support/message_of.hpp"

namespace {
TPX_MESH_AXES(X, Y);
TPX_DIMS(I, J, K);

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

template <class T>
bool same_block(const T& a, const T& b) {
  const auto x = a.local();
  const auto y = b.local();
  return std::equal(x.begin(), x.end(), y.begin(), y.end());
}
}  // namespace

TEST_CASE("background collectives equal the rank's own, bit for bit, and the unsharded result") {
  // Per round, each rank queues a gather over X, a gather over Y and a reduce-scatter over X on
  // its communication thread, then runs the same three on its own thread while those run: had the
  // two threads shared a group's order, calls would pair across threads and mismatch or hang.
  std::mutex m;
  std::vector<std::string> wrong;
  const auto note = [&](const std::string& what) {
    std::lock_guard lock(m);
    wrong.push_back(what);
  };
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    const auto main_thread = std::this_thread::get_id();
    for (std::uint64_t round = 0; round < 5; ++round) {
      const auto a = tpx::randn<float, I<>, J<X>>(rank, {I(6), J(10)}, 10 + round);
      const auto b = tpx::randn<float, J<X>, K<>>(rank, {J(10), K(7)}, 20 + round);
      const auto c = tpx::randn<float, I<Y>, K<>>(rank, {I(6), K(7)}, 30 + round);
      const auto partial = tpx::matmul(a, b);  // [I, K]{U_X}
      std::atomic<bool> elsewhere{true};
      const auto here = [&] { elsewhere = elsewhere && std::this_thread::get_id() != main_thread; };
      auto a_bg = tpx::in_background(rank, [&] {
        here();
        return tpx::all_gather<X>(a);
      });
      auto c_bg = tpx::in_background(rank, [&] {
        here();
        return tpx::all_gather<Y>(c);
      });
      auto rs_bg = tpx::in_background(rank, [&] {
        here();
        return tpx::reduce_scatter<X, K>(partial);
      });
      const auto a_fg = tpx::all_gather<X>(a);
      const auto c_fg = tpx::all_gather<Y>(c);
      const auto rs_fg = tpx::reduce_scatter<X, K>(partial);
      if (!same_block(a_bg.get(), a_fg)) note("gather over X differs");
      if (!same_block(c_bg.get(), c_fg)) note("gather over Y differs");
      if (!same_block(rs_bg.get(), rs_fg)) note("reduce-scatter over X differs");
      if (!elsewhere) note("a task ran on the rank's own thread");

      // The unsharded references: random tensors are functions of their global index.
      if (!same_block(a_fg, tpx::randn<float, I<>, J<>>(rank, {I(6), J(10)}, 10 + round)) ||
          !same_block(c_fg, tpx::randn<float, I<>, K<>>(rank, {I(6), K(7)}, 30 + round)))
        note("a gather differs from the unsharded tensor");
      const auto ga = tpx::to_global(a), gb = tpx::to_global(b), rs = tpx::to_global(rs_fg);
      for (int i = 0; i < 6; ++i)
        for (int k = 0; k < 7; ++k) {
          double sum = 0;
          for (int j = 0; j < 10; ++j) sum += double(ga[i * 10 + j]) * double(gb[j * 7 + k]);
          if (std::abs(rs[i * 7 + k] - sum) > 1e-5 * (1 + std::abs(sum)))
            note("reduce-scatter differs from the unsharded product");
        }
    }
  });
  for (const std::string& w : wrong) FAIL_CHECK(w);
}

TEST_CASE("a background task that throws fails every rank at once, naming the rank") {
  std::string rank0_saw;
  const auto start = clock_type::now();
  const std::string what = message_of([&] {
    tpx::spmd(tpx::host, tpx::Mesh<X>{2},
              [&](auto& rank) {
                const auto t = tpx::randn<float, I<X>>(rank, {I(8)}, 1);
                auto gathered = tpx::in_background(rank, [&] {
                  if (rank.world_rank() == 1) throw std::runtime_error("shard 1 is corrupt");
                  return tpx::all_gather<X>(t);
                });
                try {
                  (void)gathered.get();
                } catch (const std::exception& e) {
                  if (rank.world_rank() == 0) rank0_saw = e.what();
                  throw;
                }
              },
              {.timeout = std::chrono::seconds(60)});
  });
  CHECK(clock_type::now() - start < 10s);
  CHECK(what == "tpx: rank 1 (X=1) failed: shard 1 is corrupt");
  CHECK(rank0_saw ==
        "tpx: collective #1 on group {0,1} (mesh axis X, communication thread), all_gather<float> "
        "of 8 elements, aborted: rank 1 failed: shard 1 is corrupt");
}

TEST_CASE("mismatched background collectives fail on every rank, naming the collective") {
  const auto start = clock_type::now();
  const std::string what = message_of([&] {
    tpx::spmd(tpx::host, tpx::Mesh<X>{2},
              [&](auto& rank) {
                const auto t =
                    tpx::randn<float, I<X>>(rank, {I(rank.world_rank() == 0 ? 8 : 6)}, 1);
                (void)tpx::in_background(rank, [&] { return tpx::all_gather<X>(t); }).get();
              },
              {.timeout = std::chrono::seconds(60)});
  });
  INFO(what);
  CHECK(clock_type::now() - start < 10s);
  CHECK(
      what.starts_with("tpx: rank 0 (X=0) failed: tpx: mismatched collectives on group {0,1} "
                       "(mesh axis X, communication thread) at collective #1"));
}

TEST_CASE("a rank that throws while its background gather waits releases every rank at once") {
  // Rank 0 starts a gather in the background and throws. Rank 1 is waiting in a collective of
  // its own thread, which rank 0 never joins, and would start the gather only after it: unless
  // rank 0, leaving its gather unfinished, aborts the world, rank 0 waits for rank 1's gather and
  // rank 1 for rank 0 until the time-out.
  const auto start = clock_type::now();
  const std::string what = message_of([&] {
    tpx::spmd(tpx::host, tpx::Mesh<X>{2},
              [&](auto& rank) {
                const auto t = tpx::randn<float, I<X>>(rank, {I(8)}, 1);
                if (rank.world_rank() == 0) {
                  auto gathered = tpx::in_background(rank, [&] { return tpx::all_gather<X>(t); });
                  throw std::runtime_error("bad batch");
                }
                (void)tpx::all_gather<X>(t);
                (void)tpx::in_background(rank, [&] { return tpx::all_gather<X>(t); }).get();
              },
              {.timeout = std::chrono::seconds(60)});
  });
  CHECK(clock_type::now() - start < 10s);
  CHECK(what == "tpx: rank 0 (X=0) failed: bad batch");
}

TEST_CASE("a background collective that a returned rank never started fails at once") {
  const auto start = clock_type::now();
  const std::string what = message_of([&] {
    tpx::spmd(tpx::host, tpx::Mesh<X>{2}, [&](auto& rank) {  // the default time-out: 5 minutes
      const auto t = tpx::randn<float, I<X>>(rank, {I(8)}, 1);
      if (rank.world_rank() == 0)
        (void)tpx::in_background(rank, [&] { return tpx::all_gather<X>(t); }).get();
    });
  });
  INFO(what);
  CHECK(clock_type::now() - start < 10s);
  CHECK(
      what.starts_with("tpx: rank 0 (X=0) failed: tpx: collective #1 on group {0,1} (mesh axis "
                       "X, communication thread), all_gather<float> of 8 elements, can never "
                       "complete"));
  CHECK(what.find("{1} returned without joining it") != std::string::npos);
}

TEST_CASE("a rank whose communication thread is busy is not taken for deadlocked") {
  // Rank 0's own thread waits in an all-reduce that rank 1's own thread joins only once its
  // background gather completes, which waits for rank 0's communication thread, busy for 300 ms
  // before it gathers. Every rank has a thread waiting in a collective meanwhile, but rank 0's
  // communication thread can still come: the program completes, with the right sums.
  std::vector<float> reduced(2, 0.0f);
  tpx::spmd(tpx::host, tpx::Mesh<X>{2}, [&](auto& rank) {
    const int r = rank.world_rank();
    const auto t = tpx::randn<float, I<X>>(rank, {I(8)}, 1);
    tpx::Tensor<float, I<>, tpx::Unreduced<X>> ones(rank, {I(4)});  // each rank's part: 1
    for (float& x : ones.local()) x = 1.0f;
    auto gathered = tpx::in_background(rank, [&] {
      if (r == 0) std::this_thread::sleep_for(300ms);
      return tpx::all_gather<X>(t);
    });
    const auto sum = [&] { return tpx::all_reduce<X>(ones); };
    if (r == 0) {
      reduced[r] = sum().local()[0];
      (void)gathered.get();
    } else {
      (void)gathered.get();
      reduced[r] = sum().local()[0];
    }
  });
  CHECK(reduced == std::vector<float>{2.0f, 2.0f});
}

TEST_CASE("ranks whose threads wait for each other in a cycle fail at once with the picture") {
  // Rank 0's own thread waits in an all-reduce and starts its background gather only after it;
  // rank 1 starts the gather first and waits for it, so its own thread never reaches the
  // all-reduce: rank 0's communication thread is idle, rank 1's waits for it.
  const auto start = clock_type::now();
  const std::string what = message_of([&] {
    tpx::spmd(tpx::host, tpx::Mesh<X>{2},
              [&](auto& rank) {
                const auto t = tpx::randn<float, I<X>>(rank, {I(8)}, 1);
                const tpx::Tensor<float, I<>, tpx::Unreduced<X>> ones(rank, {I(4)});
                const auto gather = [&] { return tpx::all_gather<X>(t); };
                if (rank.world_rank() == 0) {
                  (void)tpx::all_reduce<X>(ones);
                  (void)tpx::in_background(rank, gather).get();
                } else {
                  (void)tpx::in_background(rank, gather).get();
                  (void)tpx::all_reduce<X>(ones);
                }
              },
              {.timeout = std::chrono::seconds(60)});
  });
  INFO(what);
  CHECK(clock_type::now() - start < 10s);
  CHECK(what.find("deadlock: no collective can complete") != std::string::npos);
  CHECK(what.find("world rank 0 waits in collective #1 on group {0,1} (mesh axis X), "
                  "all_reduce<float> of 4 elements, where {1} never came") != std::string::npos);
  CHECK(what.find("world rank 1 waits in collective #1 on group {0,1} (mesh axis X, "
                  "communication thread), all_gather<float> of 8 elements, where {0} never "
                  "came") != std::string::npos);
  CHECK(what.find("world rank 1 waits for a background task of its communication thread") !=
        std::string::npos);
}

TEST_CASE("a pending result destroyed unread waits for its task, whose failure fails the rank") {
  std::atomic<bool> finished{false};
  bool finished_when_dropped = false;
  const std::string what = message_of([&] {
    tpx::spmd(tpx::host, tpx::Mesh<X>{1}, [&](auto& rank) {
      {
        auto slow = tpx::in_background(rank, [&] {
          std::this_thread::sleep_for(50ms);
          finished = true;
        });
      }
      finished_when_dropped = finished;
      auto failing = tpx::in_background(rank, [] { throw std::runtime_error("dropped"); });
    });
  });
  CHECK(finished_when_dropped);
  CHECK(what == "tpx: rank 0 (X=0) failed: dropped");
}

TEST_CASE("without a communication thread, and on it, in_background runs its task at once") {
  const auto caller = std::this_thread::get_id();
  const tpx::rank_context alone(0, 1, {}, {});  // as a launcher without one makes it
  std::thread::id ran_on;
  auto seven = tpx::in_background(alone, [&] {
    ran_on = std::this_thread::get_id();
    return 7;
  });
  CHECK(ran_on == caller);
  CHECK(seven.get() == 7);
  CHECK_FALSE(seven.valid());
  CHECK_THROWS_AS((void)seven.get(), std::logic_error);
  CHECK_THROWS_WITH_AS(
      (void)tpx::in_background(alone, []() -> int { throw std::runtime_error("now"); }), "now",
      std::runtime_error);

  bool nested_on_same_thread = false;
  tpx::spmd(tpx::host, tpx::Mesh<X>{2}, [&](auto& rank) {
    const auto t = tpx::randn<float, I<X>>(rank, {I(8)}, 1);
    auto outer = tpx::in_background(rank, [&] {
      const auto here = std::this_thread::get_id();
      auto inner = tpx::in_background(rank, [&] {
        return std::pair(std::this_thread::get_id() == here, tpx::all_gather<X>(t));
      });
      return inner.get().first;
    });
    const bool same = outer.get();
    if (rank.world_rank() == 0) nested_on_same_thread = same;
  });
  CHECK(nested_on_same_thread);
}

namespace {
// A backend whose lane writes down what happens to it, in order.
class recording_lane final : public tpx::backend_state, public tpx::background_lane {
 public:
  std::vector<std::string> events;

  tpx::background_lane* lane() override { return this; }
  void enter() override {
    REQUIRE_FALSE(entered_);
    entered_ = true;
    events.push_back("enter");
  }
  std::unique_ptr<tpx::lane_join> leave() override {
    REQUIRE(entered_);
    entered_ = false;
    events.push_back("leave " + std::to_string(++left_));
    return std::make_unique<join>(*this, left_);
  }
  bool entered() const override { return entered_; }

 private:
  class join final : public tpx::lane_join {
   public:
    join(recording_lane& lane, int task) : lane_(&lane), task_(task) {}
    void wait() override { lane_->events.push_back("join " + std::to_string(task_)); }

   private:
    recording_lane* lane_;
    int task_;
  };

  bool entered_ = false;
  int left_ = 0;
};

// A result that says when it is destroyed.
struct noted {
  std::vector<std::string>* events;
  int value;
  noted(std::vector<std::string>& e, int v) : events(&e), value(v) {}
  noted(noted&& other) noexcept : events(other.events), value(std::exchange(other.value, -1)) {}
  ~noted() {
    if (value >= 0) events->push_back("destroy " + std::to_string(value));
  }
};
}  // namespace

TEST_CASE("on a backend with a background lane, a task's work is queued there and joined") {
  recording_lane backend;
  tpx::rank_context rank(0, 1, {}, {});
  rank.set_backend(&backend);
  std::vector<std::string>& events = backend.events;

  auto seven = tpx::in_background(rank, [&] {
    events.push_back(backend.entered() ? "task on the lane" : "task off the lane");
    auto inner = tpx::in_background(rank, [&] {  // already on the lane: runs there at once
      events.push_back(backend.entered() ? "inner on the lane" : "inner off the lane");
      return 3;
    });
    return inner.get() + 4;
  });
  events.push_back("rank computes");
  CHECK(seven.get() == 7);
  CHECK(events == std::vector<std::string>{"enter", "task on the lane", "inner on the lane",
                                           "leave 1", "rank computes", "join 1"});

  events.clear();
  {
    auto dropped = tpx::in_background(rank, [&] { return noted(events, 5); });
  }
  CHECK(events == std::vector<std::string>{"enter", "leave 2", "join 2", "destroy 5"});

  events.clear();
  CHECK_THROWS_WITH_AS(
      (void)tpx::in_background(rank, []() -> int { throw std::runtime_error("lost its input"); }),
      "lost its input", std::runtime_error);
  CHECK_FALSE(backend.entered());
  CHECK(events == std::vector<std::string>{"enter", "leave 3", "join 3"});
}

TEST_CASE("a wait counts as exposed only the background time it waited through") {
  tpx::communication_seconds before, waited, hidden;
  tpx::spmd(tpx::host, tpx::Mesh<X>{1}, [&](auto& rank) {
    before = tpx::communication_time(rank);
    tpx::in_background(rank, [] { std::this_thread::sleep_for(100ms); }).get();
    waited = tpx::communication_time(rank);
    auto overlapped = tpx::in_background(rank, [] { std::this_thread::sleep_for(100ms); });
    std::this_thread::sleep_for(400ms);  // computing, as far as the task can tell
    overlapped.get();
    hidden = tpx::communication_time(rank);
  });
  CHECK(before.total == 0);
  CHECK(before.exposed == 0);
  const double busy_waited = waited.total - before.total;
  const double busy_hidden = hidden.total - waited.total;
  CHECK(busy_waited >= 0.1);
  CHECK(busy_hidden >= 0.1);
  CHECK(waited.exposed - before.exposed >= 0.5 * busy_waited);
  CHECK(hidden.exposed - waited.exposed <= 0.5 * busy_hidden);
  CHECK(waited.exposed <= waited.total);
  CHECK(hidden.exposed <= hidden.total);
}

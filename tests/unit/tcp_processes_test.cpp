// tcp_processes, the process group of a launch started by torchrun or srun: every process gets
// rank 0's text (empty, small, and larger than one rendezvous carries), first_process_decides
// gives every process rank 0's decision or its error, and a process that skips the decision for
// NCCL's rendezvous makes both fail with a message naming the two. Also the launch's rendezvous one
// after another on one port, as a trainer under torchrun makes them (its checkpoint decision, the
// measured peak's ranks, then training's): each must meet, where a rank that hurried on to the next
// one once queued on the listener rank 0 was closing and failed. The "processes" are threads here,
// each with the launch environment torchrun would give it, on loopback.
#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <tpx/launch/process_group.hpp>
#include <tpx/launch/tcp_processes.hpp>
#include <tpx/launch/tcp_rendezvous.hpp>
#include <vector>

#include "../support/launched_threads.hpp"

namespace {

using namespace std::chrono_literals;

// What each of `world` processes, on threads, makes of body(its group, its environment): the
// text it returns, or the message of what it throws.
std::vector<std::string> on_each_process(
    int world,
    const std::function<std::string(const tpx::tcp_processes&, const tpx::launch_environment&)>&
        body) {
  std::vector<std::string> out(static_cast<std::size_t>(world));
  on_launched_threads(world, [&](const tpx::launch_environment& env) {
    const tpx::tcp_processes group(env, 20s);
    try {
      out[env.rank] = body(group, env);
    } catch (const std::exception& e) {
      out[env.rank] = std::string("threw: ") + e.what();
    }
  });
  return out;
}

// A text of n bytes that differs at every position of a period prime to 2^20, so that a part
// received in the wrong place shows.
std::string pattern(std::size_t n, char salt) {
  std::string text(n, '\0');
  for (std::size_t i = 0; i < n; ++i) text[i] = static_cast<char>(salt + i % 251);
  return text;
}

}  // namespace

TEST_CASE("every process gets rank 0's texts, one broadcast after another") {
  const std::size_t large = (std::size_t{5} << 19) + 3;  // 2.5 MiB: three rendezvous
  const auto got = on_each_process(4, [&](const tpx::tcp_processes& group, const auto&) {
    const bool first = group.rank() == 0;
    std::string seen;
    for (const std::string& text : {std::string("run 7f3a, step 120"), std::string(),
                                    pattern(large, 'a'), std::string("last")}) {
      const std::string received = group.broadcast_from_first(first ? text : "not this");
      seen += received == text ? "=" : "x" + std::to_string(received.size());
    }
    return seen;
  });
  for (int r = 0; r < 4; ++r) {
    INFO("process " << r);
    CHECK(got[r] == "====");
  }
}

TEST_CASE("first_process_decides gives every process rank 0's answer, or its error") {
  const auto answers = on_each_process(3, [](const tpx::tcp_processes& group, const auto&) {
    return tpx::first_process_decides(group, [] { return std::string("resume from step 40"); });
  });
  for (const std::string& answer : answers) CHECK(answer == "resume from step 40");

  const auto failures = on_each_process(3, [](const tpx::tcp_processes& group, const auto&) {
    return tpx::first_process_decides(group, []() -> std::string {
      throw std::runtime_error("ckpt: checkpoint folder is in use by another writer (pid 12)");
    });
  });
  for (const std::string& failure : failures)
    CHECK(failure == "threw: ckpt: checkpoint folder is in use by another writer (pid 12)");
}

TEST_CASE("a process that goes on to NCCL's rendezvous while rank 0 decides fails, naming both") {
  const auto got =
      on_each_process(2, [](const tpx::tcp_processes& group, const tpx::launch_environment& env) {
        if (group.rank() == 0) return group.broadcast_from_first("run 7f3a, step 120");
        tpx::tcp_rendezvous(env, {}, "tpx mesh 2x1", 20s);  // skipped the decision
        return std::string("met");
      });
  const std::string mismatch =
      "rank 1 runs a different build or mesh than rank 0: rank 0 has 'tpx process group: a "
      "broadcast of rank 0 before the ranks start', rank 1 has 'tpx mesh 2x1'";
  CHECK(got[0] == "threw: tpx: rank 0: the rendezvous failed: " + mismatch);
  CHECK(got[1] == "threw: tpx: rank 1 of 2: the rendezvous failed at rank 0: " + mismatch);
}

TEST_CASE("a launch's rendezvous one after another on one port all meet") {
  const auto got =
      on_each_process(4, [](const tpx::tcp_processes& group, const tpx::launch_environment& env) {
        int met = 0;
        for (int round = 0; round < 12; ++round) {
          const std::string text = "round " + std::to_string(round);
          if (group.broadcast_from_first(group.rank() == 0 ? text : "") == text) ++met;
        }
        const std::string id = "NCCL's id";  // then the rendezvous of spmd(tpx::cuda_launched)
        const std::vector<std::byte> bytes =
            tpx::tcp_rendezvous(env, std::as_bytes(std::span(id)), "tpx mesh 2x2", 20s);
        if (std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()) == id) ++met;
        return std::to_string(met);
      });
  for (int r = 0; r < 4; ++r) {
    INFO("process " << r);
    CHECK(got[r] == "13");
  }
}

// The bootstrap of processes started without MPI (issue 10): launch_environment_from reads
// torchrun's and srun's variables and names the one that is wrong; tcp_rendezvous, run by
// processes started here by hand (tests/launch/rendezvous_peer.cpp, posix_spawn with an
// environment of our making, no MPI), gives every rank rank 0's bytes, and fails on every rank
// with a message within its timeout when rank 0 is unreachable, a rank never comes, two ranks
// claim one rank, the builds or world sizes differ, or two ranks claim one GPU (their
// exclusive_claims, as the CUDA launch makes them from the GPUs' UUIDs: the rule and the UUID's
// text are checked here too).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tpx/launch/exclusive_claims.hpp>
#include <tpx/launch/launch_environment.hpp>
#include <tpx/launch/tcp_rendezvous.hpp>
#include <utility>
#include <vector>

#include "../support/environment_table.hpp"
#include "../support/free_port.hpp"
#include "../support/message_of.hpp"

namespace {

namespace fs = std::filesystem;
using variables = environment_table;
using clock_type = std::chrono::steady_clock;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct finished {
  int exit_code;
  std::string out, err;
};

// A rendezvous_peer process with exactly `env` as its environment, stdout and stderr to files.
class peer {
 public:
  peer(const variables& env, const std::string& fingerprint, int timeout_ms,
       const tpx::exclusive_claim& claim = {}) {
    static int count = 0;
    folder_ = fs::temp_directory_path() /
              ("tpx-rendezvous-" + std::to_string(::getpid()) + "-" + std::to_string(count++));
    fs::create_directories(folder_);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 1, (folder_ / "out").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&files, 2, (folder_ / "err").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> texts;
    for (const auto& [name, value] : env) texts.push_back(name + "=" + value);
    std::vector<char*> envp;
    for (std::string& text : texts) envp.push_back(text.data());
    envp.push_back(nullptr);
    std::string program = TPX_RENDEZVOUS_PEER, timeout = std::to_string(timeout_ms);
    std::string print = fingerprint, key = claim.key, holder = claim.holder;
    char* argv[] = {program.data(), print.data(), timeout.data(),
                    claim.key.empty() ? nullptr : key.data(), holder.data(), nullptr};
    const int started = ::posix_spawn(&pid_, program.c_str(), &files, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&files);
    REQUIRE_MESSAGE(started == 0, "posix_spawn of " << program << " failed");
  }
  peer(const peer&) = delete;
  peer& operator=(const peer&) = delete;
  ~peer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    fs::remove_all(folder_, ignored);
  }

  finished wait() {
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    pid_ = -1;
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
            read_file(folder_ / "out"), read_file(folder_ / "err")};
  }

 private:
  fs::path folder_;
  pid_t pid_ = -1;
};

variables torchrun(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

variables srun(int rank, int world, int port) {
  return {{"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NUM_TASKS", std::to_string(world)},
          {"SLURM_NTASKS", std::to_string(world)},
          {"SLURM_LOCALID", std::to_string(rank)},
          {"MASTER_ADDR", "localhost"},
          {"MASTER_PORT", std::to_string(port)}};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

tpx::launch_environment from(const variables& env) {
  return tpx::launch_environment_from(lookup_in(env));
}

}  // namespace

TEST_CASE("launch_environment_from reads torchrun's and srun's variables") {
  const tpx::launch_environment t = from(torchrun(2, 4, 29500));
  CHECK(t.rank == 2);
  CHECK(t.world_size == 4);
  CHECK(t.local_rank == 2);
  CHECK(t.master_addr == "127.0.0.1");
  CHECK(t.rendezvous_port == 29500);
  CHECK(t.port_origin == "MASTER_PORT");
  CHECK(t.launcher == "torchrun");

  const tpx::launch_environment s = from(srun(1, 2, 1234));
  CHECK(s.rank == 1);
  CHECK(s.world_size == 2);
  CHECK(s.launcher == "srun");
  variables preserved = srun(1, 2, 1234);  // srun --preserve-env: the allocation's SLURM_NTASKS
  preserved["SLURM_NTASKS"] = "8";
  CHECK(from(preserved).world_size == 2);
  variables older = srun(1, 2, 1234);  // an srun without SLURM_STEP_NUM_TASKS
  older.erase("SLURM_STEP_NUM_TASKS");
  CHECK(from(older).world_size == 2);

  variables both = srun(0, 8, 1);
  for (const auto& [name, value] : torchrun(3, 4, 29500)) both[name] = value;
  CHECK(from(both).rank == 3);  // torchrun inside a SLURM allocation

  variables agent_store = torchrun(0, 4, 29500);  // PyTorch >= 2.4: torchrun's store on 29500
  agent_store["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  CHECK(from(agent_store).rendezvous_port == 29501);
  CHECK(from(agent_store).port_origin ==
        "MASTER_PORT + 1, as torchrun's agent store holds MASTER_PORT");
  agent_store["TPX_RENDEZVOUS_PORT"] = "40000";
  CHECK(from(agent_store).rendezvous_port == 40000);
  CHECK(from(agent_store).port_origin == "TPX_RENDEZVOUS_PORT");
}

TEST_CASE("launch_environment_from names the variable that is missing or wrong") {
  const auto message = [](variables env) {
    CHECK_THROWS_AS((void)from(env), std::invalid_argument);
    return message_of([&] { (void)from(env); });
  };
  CHECK(contains(message({}), "neither RANK (torchrun) nor SLURM_PROCID (srun) is set"));
  variables batch_script = srun(0, 4, 29500);  // sbatch's script: SLURM_PROCID=0, but no step
  batch_script.erase("SLURM_STEP_ID");
  CHECK(message(batch_script) ==
        "tpx: not started by a multi-process launcher: SLURM_PROCID is set, but neither "
        "SLURM_STEP_ID nor SLURM_STEPID: a SLURM batch script's own process, not a task of srun "
        "(start the program with srun)");

  variables no_world = torchrun(0, 4, 29500);
  no_world.erase("WORLD_SIZE");
  CHECK(message(no_world) == "tpx: cannot join a torchrun launch: WORLD_SIZE is not set");

  CHECK(message(torchrun(4, 4, 29500)) ==
        "tpx: cannot join a torchrun launch: RANK='4' is not a whole number from 0 to 3");
  variables bad_port = torchrun(0, 4, 29500);
  bad_port["MASTER_PORT"] = "29500x";
  CHECK(message(bad_port) ==
        "tpx: cannot join a torchrun launch: MASTER_PORT='29500x' is not a whole number from 1 "
        "to 65535");
  CHECK(contains(message(torchrun(0, 4, 70000)), "MASTER_PORT='70000'"));
  variables no_address = srun(0, 2, 29500);
  no_address.erase("MASTER_ADDR");
  CHECK(message(no_address) == "tpx: cannot join a srun launch: MASTER_ADDR is not set");
  variables zero_world = srun(0, 2, 29500);
  zero_world["SLURM_STEP_NUM_TASKS"] = "0";
  CHECK(contains(message(zero_world), "SLURM_STEP_NUM_TASKS='0' is not a whole number from 1"));
}

TEST_CASE("four processes started by hand, rank 0 last, all get rank 0's bytes") {
  const int port = free_port();
  std::vector<std::unique_ptr<peer>> ranks(4);
  for (int r = 3; r >= 1; --r)
    ranks[r] = std::make_unique<peer>(torchrun(r, 4, port), "tpx mesh 2x2", 20000);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others retry meanwhile
  ranks[0] = std::make_unique<peer>(torchrun(0, 4, port), "tpx mesh 2x2", 20000);
  std::vector<finished> results;
  for (auto& r : ranks) results.push_back(r->wait());
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << ": " << results[r].err);
    CHECK(results[r].exit_code == 0);
    CHECK(results[r].out.size() == 2 * 128 + 1);  // 128 bytes in hex and a newline
    CHECK(results[r].out == results[0].out);
  }
}

TEST_CASE("srun's variables and a host name for MASTER_ADDR") {
  const int port = free_port();
  peer rank0(srun(0, 2, port), "same", 20000);
  peer rank1(srun(1, 2, port), "same", 20000);
  const finished a = rank0.wait(), b = rank1.wait();
  INFO(a.err << b.err);
  CHECK(a.exit_code == 0);
  CHECK(b.exit_code == 0);
  CHECK(a.out.size() == 2 * 128 + 1);
  CHECK(a.out == b.out);
}

TEST_CASE("a rank that cannot reach rank 0 fails within its timeout, naming the address") {
  const int port = free_port();
  const auto start = clock_type::now();
  peer lonely(torchrun(1, 2, port), "tpx", 1500);
  const finished result = lonely.wait();
  const std::chrono::duration<double> took = clock_type::now() - start;
  INFO(result.err);
  CHECK(result.exit_code == 1);
  CHECK(took.count() >= 1.4);
  CHECK(took.count() < 1.5 + 3.0);
  CHECK(contains(result.err, "tpx: rank 1 of 2 could not reach the rendezvous at 127.0.0.1:" +
                                 std::to_string(port) +
                                 " (MASTER_ADDR, MASTER_PORT) within 1.5 s: Connection refused"));
  CHECK(contains(result.err, "Is rank 0 running"));
}

TEST_CASE("rank 0 says when the port is taken, and how to choose another") {
  const auto [taken, port] = bound_socket();
  REQUIRE(::listen(taken, 1) == 0);
  peer rank0(torchrun(0, 2, port), "tpx", 1500);
  const finished zero = rank0.wait();
  ::close(taken);
  INFO(zero.err);
  CHECK(zero.exit_code == 1);
  CHECK(contains(zero.err, "tpx: rank 0 cannot listen on port " + std::to_string(port) +
                               " (MASTER_PORT) of "));
  CHECK(contains(zero.err, "Address already in use; TPX_RENDEZVOUS_PORT chooses another port"));
}

TEST_CASE("rank 0 names the ranks that never came, and tells the ones that did") {
  const int port = free_port();
  const auto start = clock_type::now();
  peer rank0(torchrun(0, 4, port), "tpx", 1500);
  peer rank2(torchrun(2, 4, port), "tpx", 20000);
  const finished zero = rank0.wait(), two = rank2.wait();
  const std::chrono::duration<double> took = clock_type::now() - start;
  INFO(zero.err << two.err);
  CHECK(zero.exit_code == 1);
  CHECK(two.exit_code == 1);
  CHECK(took.count() < 1.5 + 3.0);
  const std::string missing =
      "ranks 1, 3 of 4 did not reach the rendezvous on port " + std::to_string(port);
  CHECK(contains(zero.err, "tpx: rank 0: the rendezvous failed: " + missing));
  CHECK(contains(zero.err, "within 1.5 s"));
  CHECK(contains(two.err, "tpx: rank 2 of 4: the rendezvous failed at rank 0: " + missing));
}

TEST_CASE(
    "different builds, meshes or world sizes, and two processes claiming one rank, fail on every "
    "rank") {
  SUBCASE("fingerprints differ") {
    const int port = free_port();
    peer rank0(torchrun(0, 2, port), "tpx 0.4 mesh 2x2", 20000);
    peer rank1(torchrun(1, 2, port), "tpx 0.4 mesh 4x1", 20000);
    const finished zero = rank0.wait(), one = rank1.wait();
    const std::string why =
        "rank 1 runs a different build or mesh than rank 0: rank 0 has 'tpx 0.4 mesh 2x2', rank "
        "1 has 'tpx 0.4 mesh 4x1'";
    CHECK(zero.exit_code == 1);
    CHECK(one.exit_code == 1);
    CHECK(contains(zero.err, why));
    CHECK(contains(one.err, "tpx: rank 1 of 2: the rendezvous failed at rank 0: " + why));
  }
  SUBCASE("world sizes differ") {
    const int port = free_port();
    peer rank0(torchrun(0, 2, port), "tpx", 20000);
    peer rank1(torchrun(1, 3, port), "tpx", 20000);
    const finished zero = rank0.wait(), one = rank1.wait();
    const std::string why = "rank 1 was started for a world of 3 processes, rank 0 for 2";
    CHECK(zero.exit_code == 1);
    CHECK(one.exit_code == 1);
    CHECK(contains(zero.err, why));
    CHECK(contains(one.err, "tpx: rank 1 of 3: the rendezvous failed at rank 0: " + why));
  }
  SUBCASE("two ranks 1") {
    const int port = free_port();
    peer rank0(torchrun(0, 3, port), "tpx", 20000);
    peer first(torchrun(1, 3, port), "tpx", 20000);
    peer second(torchrun(1, 3, port), "tpx", 20000);
    const finished zero = rank0.wait(), a = first.wait(), b = second.wait();
    const std::string why = "two processes both say they are rank 1 (each needs its own RANK)";
    CHECK(zero.exit_code == 1);
    CHECK(contains(zero.err, why));
    CHECK(a.exit_code == 1);
    CHECK(b.exit_code == 1);
    CHECK(contains(a.err + b.err, "the rendezvous failed at rank 0: " + why));
  }
}

TEST_CASE("shared_claim_problem names the first two ranks that claim one thing") {
  using claims = std::vector<tpx::exclusive_claim>;
  CHECK(tpx::shared_claim_problem(claims{}).empty());
  CHECK(tpx::shared_claim_problem(claims{{"GPU a", "device 0"}, {"GPU b", "device 1"}}).empty());
  CHECK(tpx::shared_claim_problem(claims{{"", "nothing"}, {"", "nothing"}}).empty());
  CHECK(tpx::shared_claim_problem(claims{{"GPU a", "device 0 on n1"},
                                         {"GPU b", "device 1 on n1"},
                                         {"GPU b", "device 0 (CUDA_VISIBLE_DEVICES=1) on n1"},
                                         {"GPU a", "device 0 on n1"}}) ==
        "rank 1 (device 1 on n1) and rank 2 (device 0 (CUDA_VISIBLE_DEVICES=1) on n1) both claim "
        "GPU b; each rank needs one of its own");
}

TEST_CASE("gpu_uuid_text writes a UUID as nvidia-smi -L does") {
  std::array<unsigned char, 16> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 17);
  CHECK(tpx::gpu_uuid_text(bytes) == "GPU-00112233-4455-6677-8899-aabbccddeeff");
  bytes.fill(0xf0);
  CHECK(tpx::gpu_uuid_text(bytes) == "GPU-f0f0f0f0-f0f0-f0f0-f0f0-f0f0f0f0f0f0");
}

TEST_CASE("two ranks that claim one GPU fail on every rank, naming both; distinct GPUs meet") {
  const auto device = [](int local_rank) -> tpx::exclusive_claim {
    return {"GPU GPU-" + std::to_string(local_rank % 2),
            "device " + std::to_string(local_rank % 2) + ", local rank " +
                std::to_string(local_rank) + " on n1"};
  };
  SUBCASE("ranks 1 and 3 share a GPU") {
    const int port = free_port();
    std::vector<std::unique_ptr<peer>> ranks;
    for (int r = 0; r < 4; ++r)
      ranks.push_back(std::make_unique<peer>(torchrun(r, 4, port), "tpx", 20000,
                                             r == 0 ? tpx::exclusive_claim{"GPU GPU-x", "x"}
                                                    : device(r)));
    const std::string why =
        "rank 1 (device 1, local rank 1 on n1) and rank 3 (device 1, local rank 3 on n1) both "
        "claim GPU GPU-1; each rank needs one of its own";
    for (int r = 0; r < 4; ++r) {
      const finished result = ranks[r]->wait();
      INFO("rank " << r << ": " << result.err);
      CHECK(result.exit_code == 1);
      CHECK(contains(result.err, r == 0 ? "tpx: rank 0: the rendezvous failed: " + why
                                        : "tpx: rank " + std::to_string(r) +
                                              " of 4: the rendezvous failed at rank 0: " + why));
    }
  }
  SUBCASE("rank 0 and rank 2 share one, found on rank 0's own claim") {
    const int port = free_port();
    peer rank0(torchrun(0, 3, port), "tpx", 20000, device(0));
    peer rank1(torchrun(1, 3, port), "tpx", 20000, device(1));
    peer rank2(torchrun(2, 3, port), "tpx", 20000, device(2));
    const finished zero = rank0.wait(), one = rank1.wait(), two = rank2.wait();
    INFO(zero.err << one.err << two.err);
    const std::string why =
        "rank 0 (device 0, local rank 0 on n1) and rank 2 (device 0, local rank 2 on n1) both "
        "claim GPU GPU-0";
    CHECK(zero.exit_code == 1);
    CHECK(one.exit_code == 1);
    CHECK(two.exit_code == 1);
    CHECK(contains(zero.err, why));
    CHECK(contains(one.err, why));
    CHECK(contains(two.err, why));
  }
  SUBCASE("each its own") {
    const int port = free_port();
    peer rank0(torchrun(0, 2, port), "tpx", 20000, device(0));
    peer rank1(torchrun(1, 2, port), "tpx", 20000, device(1));
    const finished zero = rank0.wait(), one = rank1.wait();
    INFO(zero.err << one.err);
    CHECK(zero.exit_code == 0);
    CHECK(one.exit_code == 0);
    CHECK(zero.out == one.out);
  }
}

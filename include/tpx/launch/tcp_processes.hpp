// tcp_processes: the process group (launch/process_group.hpp) of a launch started by torchrun or
// srun, whose processes have no MPI to agree through: rank 0 broadcasts over the TCP rendezvous
// of launch/tcp_rendezvous.hpp, on the port the launch's NCCL id travels on later. It is what
// processes_of(tpx::cuda_launched) gives (cuda/nccl_launch.hpp), so that code run before the
// ranks start (the example trainers' checkpoint folder: which process locks it, which run id and
// step every rank continues from) can let world rank 0 decide for every process, as under mpirun.
//
//   tpx::tcp_processes processes(tpx::launch_environment_from());
//   std::string run_id = tpx::first_process_decides(processes, [&] { return lock_the_folder(); });
//
// Each broadcast is one rendezvous (more for a text over 1 MiB, in 1 MiB parts), so it also
// checks that every process of the world arrived, and fails on every process with the reason
// when one does not within the timeout. The default timeout is long (30 minutes) because the
// first process's decision may read a large checkpoint while the others wait; a process that
// dies meanwhile is the launcher's to notice (torchrun stops the others when one fails, as does
// srun with --kill-on-bad-exit).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tpx/launch/launch_environment.hpp"
#include "tpx/launch/tcp_rendezvous.hpp"

namespace tpx {

class tcp_processes {
 public:
  explicit tcp_processes(launch_environment env,
                         std::chrono::milliseconds timeout = std::chrono::minutes(30))
      : env_(std::move(env)), timeout_(timeout) {}

  int rank() const { return env_.rank; }
  int size() const { return env_.world_size; }

  // Rank 0's text, on every process (collective: every process calls it, in the same order).
  // The first part carries the whole text's length, 8 bytes ahead of its first bytes.
  std::string broadcast_from_first(std::string text) const {
    constexpr std::size_t part_bytes = std::size_t{1} << 20;  // tcp_rendezvous's most
    constexpr std::size_t length_bytes = sizeof(std::uint64_t);
    std::vector<std::byte> first(length_bytes);
    if (rank() == 0) {
      const std::uint64_t length = text.size();
      for (std::size_t i = 0; i < length_bytes; ++i)
        first[i] = static_cast<std::byte>(length >> (8 * i));
      const auto head =
          std::as_bytes(std::span(text)).first(std::min(text.size(), part_bytes - length_bytes));
      first.insert(first.end(), head.begin(), head.end());
    }
    const std::vector<std::byte> got = meet(first);
    if (got.size() < length_bytes)
      throw rendezvous_error("tpx: rank " + std::to_string(rank()) + " received " +
                             std::to_string(got.size()) +
                             " bytes for a broadcast of rank 0, not even its length");
    std::uint64_t length = 0;
    for (std::size_t i = 0; i < length_bytes; ++i)
      length |= std::uint64_t{std::to_integer<unsigned char>(got[i])} << (8 * i);
    std::string result(reinterpret_cast<const char*>(got.data()) + length_bytes,
                       got.size() - length_bytes);
    while (result.size() < length) {  // the parts after the first, 1 MiB each
      const std::size_t take = std::min<std::uint64_t>(length - result.size(), part_bytes);
      const auto part = rank() == 0 ? std::as_bytes(std::span(text)).subspan(result.size(), take)
                                    : std::span<const std::byte>();
      const std::vector<std::byte> bytes = meet(part);
      if (bytes.size() != take)
        throw rendezvous_error("tpx: rank " + std::to_string(rank()) + " received " +
                               std::to_string(bytes.size()) + " bytes of a broadcast of rank 0 " +
                               "where " + std::to_string(take) + " were to come");
      result.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
    return result;
  }

 private:
  // One rendezvous, named for what it is, so that a process which has gone on to another one
  // (NCCL's id, while rank 0 still broadcasts a decision) fails at once, both names in the
  // message.
  std::vector<std::byte> meet(std::span<const std::byte> payload) const {
    return tcp_rendezvous(
        env_, payload, "tpx process group: a broadcast of rank 0 before the ranks start", timeout_);
  }

  launch_environment env_;
  std::chrono::milliseconds timeout_;
};

}  // namespace tpx

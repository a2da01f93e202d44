// tcp_rendezvous: rank 0 of a launch hands a few bytes (NCCL's unique id) to every other rank
// over TCP, and checks on the way that every rank runs the same build on the same mesh; the
// bootstrap of processes started without MPI (launch/launch_environment.hpp: torchrun, srun).
//
// Rank 0 listens on the rendezvous port (MASTER_PORT, or the port launch_environment.hpp
// says). Every other rank connects to MASTER_ADDR on that port, retrying every 100 ms while
// nothing listens yet (launchers start ranks in any order), and says hello: its rank, the world
// size it was started for, a fingerprint, the caller's string (tpx's build, the mesh), and what
// it holds alone (launch/exclusive_claims.hpp: its GPU; nothing by default). When all
// world_size - 1 ranks have said hello, rank 0 answers each with the payload. If one never comes
// within the timeout, two claim the same rank, a world size or a fingerprint differs from rank
// 0's, or two ranks claim one GPU, rank 0 answers every connected rank with the reason instead,
// and every rank throws rendezvous_error with it: no rank goes on into NCCL with a world that
// cannot form. A rank that cannot reach rank 0 within the timeout throws naming the address, the
// variables it came from, its host and the last socket error. Sockets are non-blocking under
// poll(), so no step waits past the deadline; writes use MSG_NOSIGNAL, so a peer that died is an
// error, not SIGPIPE. tcp_rendezvous_linked keeps the connections open afterwards (rank 0's to
// every rank, each rank's to rank 0), for the heartbeat of checked collectives
// (comm/tcp_watchdog.hpp).
//
// Wire format, integers as 4 little-endian bytes: hello = "tpxR", version, rank, world size,
// fingerprint length, fingerprint, claim key length, key, claim holder length, holder; answer =
// status (0: payload follows, 1: the reason follows), length, bytes.
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tpx/launch/exclusive_claims.hpp"
#include "tpx/launch/launch_environment.hpp"
#include "tpx/launch/this_host.hpp"

namespace tpx {

class rendezvous_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail::rendezvous {

using clock = std::chrono::steady_clock;
constexpr std::array<std::byte, 4> magic{std::byte{'t'}, std::byte{'p'}, std::byte{'x'},
                                         std::byte{'R'}};
constexpr std::uint32_t version = 2;
constexpr std::uint32_t most_bytes = 1u << 20;  // fingerprints and payloads are small

class socket_fd {
 public:
  explicit socket_fd(int fd = -1) noexcept : fd_(fd) {}
  socket_fd(socket_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  socket_fd& operator=(socket_fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  ~socket_fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }

 private:
  int fd_;
};

// What a rendezvous leaves a rank: rank 0's payload and the connections it was made over, open
// for a heartbeat (comm/tcp_watchdog.hpp): on rank 0 one to each other rank ([rank]; [0] is
// none), elsewhere the one to rank 0.
struct links {
  std::vector<std::byte> payload;
  std::vector<socket_fd> ranks;
  socket_fd rank0;
};

inline std::string seconds(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(t.count()) / 1000.0);
  return text;
}

// Waits until fd is ready for `events`; false when the deadline passes first. Looks once even
// when the deadline has passed: what is ready is not lost to the clock.
inline bool wait_for(int fd, short events, clock::time_point deadline) {
  for (;;) {
    const auto left = std::max<long long>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count());
    pollfd request{fd, events, 0};
    const int ready = ::poll(&request, 1, static_cast<int>(std::min<long long>(left, INT_MAX)));
    if (ready > 0) return true;
    if ((ready < 0 && errno != EINTR) || (ready == 0 && left == 0)) return false;
  }
}

// All of bytes sent before the deadline; false when the peer is gone or time ran out.
inline bool send_all(int fd, std::span<const std::byte> bytes, clock::time_point deadline) {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(sent));
    } else if (sent < 0 && errno == EINTR) {
      continue;
    } else if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

// Exactly bytes.size() bytes received before the deadline; false on end of stream, error or
// time out.
inline bool receive_all(int fd, std::span<std::byte> bytes, clock::time_point deadline) {
  while (!bytes.empty()) {
    const ssize_t got = ::recv(fd, bytes.data(), bytes.size(), 0);
    if (got > 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(got));
    } else if (got < 0 && errno == EINTR) {
      continue;
    } else if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLIN, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

inline void append_u32(std::vector<std::byte>& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(value >> (8 * i)));
}

inline bool receive_u32(int fd, std::uint32_t& value, clock::time_point deadline) {
  std::array<std::byte, 4> bytes;
  if (!receive_all(fd, bytes, deadline)) return false;
  value = 0;
  for (int i = 0; i < 4; ++i) value |= std::to_integer<std::uint32_t>(bytes[i]) << (8 * i);
  return true;
}

// A length-prefixed block of at most most_bytes.
inline bool receive_block(int fd, std::vector<std::byte>& out, clock::time_point deadline) {
  std::uint32_t length = 0;
  if (!receive_u32(fd, length, deadline) || length > most_bytes) return false;
  out.resize(length);
  return receive_all(fd, out, deadline);
}

inline std::span<const std::byte> bytes_of(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

inline std::string text_of(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

inline void answer(int fd, std::uint32_t status, std::span<const std::byte> body,
                   clock::time_point deadline) {
  std::vector<std::byte> message;
  append_u32(message, status);
  append_u32(message, static_cast<std::uint32_t>(body.size()));
  message.insert(message.end(), body.begin(), body.end());
  send_all(fd, message, deadline);  // a rank that left has its own error to report
}

inline std::string where(const launch_environment& env) {
  return env.master_addr + ":" + std::to_string(env.rendezvous_port) + " (MASTER_ADDR, " +
         env.port_origin + ")";
}

inline socket_fd listen_on(const launch_environment& env) {
  socket_fd listener(::socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  bool dual_stack = listener.valid();
  if (!dual_stack)
    listener = socket_fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener.valid()) {
    throw rendezvous_error(std::string("tpx: rank 0 cannot open a socket: ") +
                           std::strerror(errno));
  }
  const int yes = 1, no = 0;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  int bound = -1;
  if (dual_stack) {
    ::setsockopt(listener.get(), IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
    sockaddr_in6 any{};
    any.sin6_family = AF_INET6;
    any.sin6_addr = in6addr_any;
    any.sin6_port = htons(static_cast<std::uint16_t>(env.rendezvous_port));
    bound = ::bind(listener.get(), reinterpret_cast<const sockaddr*>(&any), sizeof any);
  } else {
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    any.sin_port = htons(static_cast<std::uint16_t>(env.rendezvous_port));
    bound = ::bind(listener.get(), reinterpret_cast<const sockaddr*>(&any), sizeof any);
  }
  if (bound != 0 || ::listen(listener.get(), SOMAXCONN) != 0) {
    throw rendezvous_error("tpx: rank 0 cannot listen on port " +
                           std::to_string(env.rendezvous_port) + " (" + env.port_origin + ") of " +
                           tpx::this_host() + ": " + std::strerror(errno) +
                           "; TPX_RENDEZVOUS_PORT chooses another port");
  }
  return listener;
}

// Rank 0: waits for every other rank's hello, then answers all with the payload or the reason
// the world cannot form.
inline links serve(const launch_environment& env, std::span<const std::byte> payload,
                   std::string_view fingerprint, const exclusive_claim& claim,
                   std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  socket_fd listener = listen_on(env);
  std::vector<socket_fd> ranks(static_cast<std::size_t>(env.world_size));
  std::vector<socket_fd> others;  // connections that named a bad rank: told why, then closed
  std::vector<exclusive_claim> claims(static_cast<std::size_t>(env.world_size));
  claims[0] = claim;
  std::string problem;
  int arrived = 0;
  while (arrived < env.world_size - 1 && problem.empty() &&
         wait_for(listener.get(), POLLIN, deadline)) {
    socket_fd peer(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!peer.valid()) continue;
    // A rank says hello as soon as it connects; a connection that does not within 5 s (a port
    // scanner) must not hold up the others.
    const auto hello_deadline = std::min(deadline, clock::now() + std::chrono::seconds(5));
    std::array<std::byte, 4> said;
    std::uint32_t peer_version = 0, rank = 0, world = 0;
    std::vector<std::byte> peer_fingerprint, claim_key, claim_holder;
    if (!receive_all(peer.get(), said, hello_deadline) || said != magic ||
        !receive_u32(peer.get(), peer_version, hello_deadline) || peer_version != version ||
        !receive_u32(peer.get(), rank, hello_deadline) ||
        !receive_u32(peer.get(), world, hello_deadline) ||
        !receive_block(peer.get(), peer_fingerprint, hello_deadline) ||
        !receive_block(peer.get(), claim_key, hello_deadline) ||
        !receive_block(peer.get(), claim_holder, hello_deadline)) {
      continue;  // not a tpx rank of this version (a port scanner, a stale process): ignored
    }
    const std::string theirs = text_of(peer_fingerprint);
    if (world != static_cast<std::uint32_t>(env.world_size)) {
      problem = "rank " + std::to_string(rank) + " was started for a world of " +
                std::to_string(world) + " processes, rank 0 for " + std::to_string(env.world_size);
      others.push_back(std::move(peer));
    } else if (rank == 0 || rank >= static_cast<std::uint32_t>(env.world_size)) {
      problem = "a process says it is rank " + std::to_string(rank) + ", outside 1.." +
                std::to_string(env.world_size - 1) + " of a world of " +
                std::to_string(env.world_size) + " (do the ranks agree on the world size?)";
      others.push_back(std::move(peer));
    } else if (ranks[rank].valid()) {
      problem = "two processes both say they are rank " + std::to_string(rank) +
                " (each needs its own " + (env.launcher == "torchrun" ? "RANK" : "SLURM_PROCID") +
                ")";
      others.push_back(std::move(peer));
    } else {
      if (theirs != fingerprint) {
        problem = "rank " + std::to_string(rank) +
                  " runs a different build or mesh than rank 0: rank 0 has '" +
                  std::string(fingerprint) + "', rank " + std::to_string(rank) + " has '" + theirs +
                  "'";
      }
      ranks[rank] = std::move(peer);
      claims[rank] = {text_of(claim_key), text_of(claim_holder)};
      ++arrived;
    }
  }
  if (problem.empty() && arrived < env.world_size - 1) {
    std::string missing;
    int count = 0;
    for (int r = 1; r < env.world_size; ++r) {
      if (ranks[r].valid()) continue;
      if (++count <= 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (count > 16) missing += " and " + std::to_string(count - 16) + " more";
    problem = (count == 1 ? "rank " : "ranks ") + missing + " of " +
              std::to_string(env.world_size) + " did not reach the rendezvous on port " +
              std::to_string(env.rendezvous_port) + " of " + tpx::this_host() + " within " +
              seconds(timeout);
  }
  if (problem.empty()) problem = shared_claim_problem(claims);
  // Closed before any rank hears back: a rank that goes on to the launch's next rendezvous on
  // this port (a decision of the process group, then NCCL's id) must find nothing listening and
  // retry, not wait in the backlog of this listener, which accepts no one any more.
  listener = socket_fd();
  const auto reply_deadline = clock::now() + std::chrono::seconds(5);
  const auto body = problem.empty() ? payload : bytes_of(problem);
  for (auto* group : {&ranks, &others}) {
    for (const socket_fd& peer : *group) {
      if (peer.valid()) answer(peer.get(), problem.empty() ? 0 : 1, body, reply_deadline);
    }
  }
  if (!problem.empty()) throw rendezvous_error("tpx: rank 0: the rendezvous failed: " + problem);
  return {{payload.begin(), payload.end()}, std::move(ranks), socket_fd()};
}

// A connected, non-blocking socket to address, or an invalid one with `error` set; waits at most
// until the deadline.
inline socket_fd connect_to(const addrinfo& address, clock::time_point deadline,
                            std::string& error) {
  socket_fd fd(::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        address.ai_protocol));
  if (!fd.valid()) {
    error = std::strerror(errno);
    return fd;
  }
  if (::connect(fd.get(), address.ai_addr, address.ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) {
    error = std::strerror(errno);
    return socket_fd();
  }
  if (!wait_for(fd.get(), POLLOUT, deadline)) {
    error = "no answer to the connection";
    return socket_fd();
  }
  int code = 0;
  socklen_t size = sizeof code;
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &code, &size);
  if (code != 0) {
    error = std::strerror(code);
    return socket_fd();
  }
  return fd;
}

// Every other rank: reaches rank 0, says hello, and waits for the answer.
inline links join(const launch_environment& env, std::string_view fingerprint,
                  const exclusive_claim& claim, std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  const std::string me =
      "tpx: rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(env.rendezvous_port);
  if (const int code = ::getaddrinfo(env.master_addr.c_str(), port.c_str(), &hints, &found)) {
    throw rendezvous_error(me + " cannot resolve MASTER_ADDR='" + env.master_addr + "' on " +
                           tpx::this_host() + ": " + ::gai_strerror(code));
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
  socket_fd rank0;
  std::string error = "nothing tried";
  while (!rank0.valid()) {
    for (const addrinfo* a = addresses.get(); a != nullptr && !rank0.valid(); a = a->ai_next) {
      rank0 = connect_to(*a, std::min(deadline, clock::now() + std::chrono::seconds(1)), error);
    }
    if (rank0.valid()) break;
    if (clock::now() >= deadline) {
      throw rendezvous_error(me + " could not reach the rendezvous at " + where(env) + " within " +
                             seconds(timeout) + ": " + error + ". Is rank 0 running, and can " +
                             tpx::this_host() + " reach that address?");
    }
    std::this_thread::sleep_for(
        std::min<clock::duration>(std::chrono::milliseconds(100), deadline - clock::now()));
  }
  std::vector<std::byte> hello(magic.begin(), magic.end());
  append_u32(hello, version);
  append_u32(hello, static_cast<std::uint32_t>(env.rank));
  append_u32(hello, static_cast<std::uint32_t>(env.world_size));
  for (const std::string_view text : {fingerprint, std::string_view(claim.key),
                                      std::string_view(claim.holder)}) {
    append_u32(hello, static_cast<std::uint32_t>(text.size()));
    const auto bytes = bytes_of(text);
    hello.insert(hello.end(), bytes.begin(), bytes.end());
  }
  std::uint32_t status = 0;
  std::vector<std::byte> body;
  if (!send_all(rank0.get(), hello, deadline) || !receive_u32(rank0.get(), status, deadline) ||
      !receive_block(rank0.get(), body, deadline)) {
    throw rendezvous_error(me + " reached rank 0 at " + where(env) + " but had no answer within " +
                           seconds(timeout) +
                           " (rank 0 answers once every rank has arrived, and its own message "
                           "names the ranks that did not)");
  }
  if (status != 0)
    throw rendezvous_error(me + ": the rendezvous failed at rank 0: " + text_of(body));
  return {std::move(body), {}, std::move(rank0)};
}

}  // namespace detail::rendezvous

using rendezvous_links = detail::rendezvous::links;

// tcp_rendezvous, keeping the connections open (rendezvous_links).
inline rendezvous_links tcp_rendezvous_linked(const launch_environment& env,
                                              std::span<const std::byte> payload,
                                              std::string_view fingerprint,
                                              std::chrono::milliseconds timeout,
                                              const exclusive_claim& claim = {}) {
  constexpr std::size_t most = detail::rendezvous::most_bytes;
  if (fingerprint.size() > most || payload.size() > most || claim.key.size() > most ||
      claim.holder.size() > most) {
    throw std::invalid_argument(
        "tpx: tcp_rendezvous carries at most 1 MiB of payload, of fingerprint and of each part "
        "of a claim");
  }
  if (env.world_size == 1)
    return {{payload.begin(), payload.end()}, {}, detail::rendezvous::socket_fd()};
  return env.rank == 0 ? detail::rendezvous::serve(env, payload, fingerprint, claim, timeout)
                       : detail::rendezvous::join(env, fingerprint, claim, timeout);
}

// Rank 0's payload (read on rank 0 only), on every rank of the launch `env` describes, once all
// have arrived with the same fingerprint and no two with one claim; rendezvous_error, on every
// rank that can be told, when that does not happen within `timeout`.
inline std::vector<std::byte> tcp_rendezvous(const launch_environment& env,
                                             std::span<const std::byte> payload,
                                             std::string_view fingerprint,
                                             std::chrono::milliseconds timeout,
                                             const exclusive_claim& claim = {}) {
  return tcp_rendezvous_linked(env, payload, fingerprint, timeout, claim).payload;
}

}  // namespace tpx

// Ports for the tests of the TCP rendezvous and what runs over it (tests/unit/rendezvous_test,
// tcp_watchdog_test): a socket bound to a port the kernel picks, or a port nothing listens on.
#pragma once

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>

// A TCP socket bound to a port the kernel picks (port 0), on every interface, and that port.
inline std::pair<int, int> bound_socket() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t size = sizeof address;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0);
  return {fd, ntohs(address.sin_port)};
}

// A port nothing listens on at the moment.
inline int free_port() {
  const auto [fd, port] = bound_socket();
  ::close(fd);
  return port;
}

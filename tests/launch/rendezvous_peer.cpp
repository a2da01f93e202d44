// One process of a launch started by hand, for rendezvous_test: it reads its place from the
// environment (tpx::launch_environment_from: torchrun's or srun's variables) and takes part in
// tpx::tcp_rendezvous with the fingerprint argv[1] and a timeout of argv[2] ms. Rank 0's payload
// is 128 random bytes, the size of an ncclUniqueId. Prints the payload it ends with in hex on
// stdout and exits 0, or prints the error on stderr and exits 1.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <tpx/launch/tcp_rendezvous.hpp>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s FINGERPRINT TIMEOUT_MS\n", argv[0]);
    return 2;
  }
  try {
    const tpx::launch_environment env = tpx::launch_environment_from();
    std::vector<std::byte> payload(128);
    std::random_device random;
    for (std::byte& b : payload) b = static_cast<std::byte>(random());
    const std::vector<std::byte> got =
        tpx::tcp_rendezvous(env, payload, argv[1], std::chrono::milliseconds(std::stoi(argv[2])));
    for (const std::byte b : got) std::printf("%02x", std::to_integer<unsigned>(b));
    std::printf("\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

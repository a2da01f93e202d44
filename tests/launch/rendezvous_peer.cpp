// One process of a launch started by hand, for rendezvous_test: it reads its place from the
// environment (tpx::launch_environment_from: torchrun's or srun's variables) and takes part in
// tpx::tcp_rendezvous with the fingerprint argv[1], a timeout of argv[2] ms and, if given, the
// claim of key argv[3] and holder argv[4] (launch/exclusive_claims.hpp). Rank 0's payload is 128
// random bytes, the size of an ncclUniqueId. Prints the payload it ends with in hex on stdout and
// exits 0, or prints the error on stderr and exits 1.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <tpx/launch/tcp_rendezvous.hpp>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: %s FINGERPRINT TIMEOUT_MS [CLAIM_KEY CLAIM_HOLDER]\n", argv[0]);
    return 2;
  }
  try {
    const tpx::launch_environment env = tpx::launch_environment_from();
    std::vector<std::byte> payload(128);
    std::random_device random;
    for (std::byte& b : payload) b = static_cast<std::byte>(random());
    tpx::exclusive_claim claim;
    if (argc == 5) claim = {argv[3], argv[4]};
    const std::vector<std::byte> got = tpx::tcp_rendezvous(
        env, payload, argv[1], std::chrono::milliseconds(std::stoi(argv[2])), claim);
    for (const std::byte b : got) std::printf("%02x", std::to_integer<unsigned>(b));
    std::printf("\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

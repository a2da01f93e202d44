// exclusive_claim: something one rank of a launch must hold alone, its GPU, as the rank declares
// it before the first collective, so that two processes driving one GPU (two ranks given the same
// LOCAL_RANK, or a CUDA_VISIBLE_DEVICES that points two tasks at one device) are refused at start
// with a sentence naming both ranks, how each came to that GPU, and the GPU. NCCL refuses such a
// world too, but later, inside ncclCommInitRank, with ncclInvalidUsage and the ranks' names only
// in its NCCL_DEBUG=WARN log (Megatron-LM users meet it as "Duplicate GPU detected": NVIDIA/
// Megatron-LM#661).
//
// The key is what identifies the thing held, the same text on every process that holds it (a
// GPU's UUID, which the CUDA runtime reports the same whatever CUDA_VISIBLE_DEVICES renumbers);
// the holder says how this rank came to it, for the message. The launchers compare the claims of
// every rank where they compare fingerprints: the TCP rendezvous on rank 0
// (launch/tcp_rendezvous.hpp), the MPI launch on every process (cuda/nccl_mpi_launch.hpp). Host
// code: the rule and the UUID's text are tested without a GPU.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>

namespace tpx {

struct exclusive_claim {
  std::string key;     // "GPU GPU-8f3e5d2a-...": the same text for the same thing on every process
  std::string holder;  // "device 0, CUDA_VISIBLE_DEVICES=3, local rank 1 on node7"
};

// "" when no two ranks claim one key (an empty key claims nothing); else the sentence naming the
// first two ranks (claims_by_rank's indices) that do: "rank 1 (...) and rank 3 (...) both claim
// GPU GPU-...; each rank needs one of its own".
inline std::string shared_claim_problem(std::span<const exclusive_claim> claims_by_rank) {
  std::map<std::string, std::size_t> first_rank_of;
  for (std::size_t r = 0; r < claims_by_rank.size(); ++r) {
    const exclusive_claim& claim = claims_by_rank[r];
    if (claim.key.empty()) continue;
    const auto [at, added] = first_rank_of.emplace(claim.key, r);
    if (added) continue;
    const exclusive_claim& first = claims_by_rank[at->second];
    std::string problem = "rank ";
    problem += std::to_string(at->second);
    problem += " (";
    problem += first.holder;
    problem += ") and rank ";
    problem += std::to_string(r);
    problem += " (";
    problem += claim.holder;
    problem += ") both claim ";
    problem += claim.key;
    problem += "; each rank needs one of its own";
    return problem;
  }
  return {};
}

// A GPU's 16-byte UUID as nvidia-smi -L prints it: "GPU-" and 32 hex digits in groups of 8, 4,
// 4, 4 and 12.
inline std::string gpu_uuid_text(std::span<const unsigned char, 16> bytes) {
  constexpr char digits[] = "0123456789abcdef";
  std::string text = "GPU-";
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    text += digits[bytes[i] >> 4];
    text += digits[bytes[i] & 0xf];
  }
  return text;
}

}  // namespace tpx

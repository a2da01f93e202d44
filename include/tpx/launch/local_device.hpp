// local_device(): which of the CUDA devices a process sees its launched rank drives, from its rank
// on the node and what the launcher made visible to it, for the one-process-per-GPU launchers
// (cuda/nccl_launch.hpp under torchrun or srun, cuda/nccl_mpi_launch.hpp under mpirun). Host
// code: the count of devices is the caller's (cudaGetDeviceCount), so the rule is tested without
// a GPU.
//
//   - The process sees the node's GPUs (torchrun; srun --gpus-per-node=8, which sets
//     CUDA_VISIBLE_DEVICES=0,...,7 for every task; mpirun): local rank L drives device L, the
//     convention of torchrun's and Megatron's users.
//   - The launcher gave the process a GPU of its own: srun --gpus-per-task=1 binds each task to
//     one GPU and sets CUDA_VISIBLE_DEVICES to it (task 3 of a node sees CUDA_VISIBLE_DEVICES=3,
//     which the CUDA runtime numbers device 0), as does a wrapper that sets
//     CUDA_VISIBLE_DEVICES=$LOCAL_RANK. It sees one device and drives it, whatever its local rank.
//   - Otherwise it has none: more ranks on the node than devices it sees, and no device of its own
//     (local_device returns -1; the caller's message, with local_device_shortage's words, says so
//     before any NCCL call, where two ranks on one GPU would fail or hang).
// Choosing by local rank alone, the first version refused srun --gpus-per-task=1 on every task
// but the first of each node, the launch README.md recommends.
#pragma once

#include <string>

namespace tpx {

// The device local rank `local_rank` drives among `visible_devices`, or -1 for none.
// `cuda_visible_devices` is the variable's value, nullptr when it is not set.
inline int local_device(int local_rank, int visible_devices, const char* cuda_visible_devices) {
  if (local_rank < visible_devices) return local_rank;
  const bool given_its_own = cuda_visible_devices != nullptr && *cuda_visible_devices != '\0';
  return visible_devices == 1 && given_its_own ? 0 : -1;
}

// "and sees 2 CUDA device(s) (CUDA_VISIBLE_DEVICES=4,5): start ...": the end of the launchers'
// message when local_device finds none; `reason` is the runtime's when it reports no device.
inline std::string local_device_shortage(int visible_devices, const char* cuda_visible_devices,
                                         const std::string& reason) {
  std::string text = "and sees ";
  text += std::to_string(visible_devices);
  text += " CUDA device(s)";
  if (!reason.empty()) {
    text += " (";
    text += reason;
    text += ')';
  }
  if (cuda_visible_devices != nullptr) {
    text += " (CUDA_VISIBLE_DEVICES=";
    text += cuda_visible_devices;
    text += ')';
  }
  text +=
      ": start at most one rank per GPU on each node, or give each process one GPU of its own "
      "(srun --gpus-per-task=1)";
  return text;
}

}  // namespace tpx

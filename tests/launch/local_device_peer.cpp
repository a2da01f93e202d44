// One task of an srun step, for slurm_program_test: which GPU the one-process-per-GPU launchers
// would drive in this process (tpx::local_device, as cuda/nccl_launch.hpp calls it), with the
// devices it sees counted from CUDA_VISIBLE_DEVICES as the CUDA runtime counts them (one per
// entry), so that Slurm's GPU binding is checked on a machine without GPUs. Prints
// "local rank L: CUDA_VISIBLE_DEVICES=V, device D" (D is -1 for none) and exits 0, or prints the
// error of reading the launch and exits 1.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <tpx/launch/launch_environment.hpp>
#include <tpx/launch/local_device.hpp>

int main() {
  try {
    const tpx::launch_environment env = tpx::launch_environment_from();
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    int devices = 0;
    if (visible != nullptr && *visible != '\0') {
      devices = 1;
      for (const char c : std::string_view(visible)) devices += c == ',';
    }
    std::printf("local rank %d: CUDA_VISIBLE_DEVICES=%s, device %d\n", env.local_rank,
                visible != nullptr ? visible : "(unset)",
                tpx::local_device(env.local_rank, devices, visible));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

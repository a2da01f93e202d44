// launch_environment: where this process stands in a multi-process launch, read from the
// variables the usual launchers set, so that a program started by torchrun or by SLURM's srun
// finds its rank, the world's size, its rank on this node (which picks its GPU) and where rank 0
// listens for the rendezvous (launch/tcp_rendezvous.hpp), without MPI.
//
//   torchrun:  RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//   srun:      SLURM_PROCID, SLURM_STEP_NUM_TASKS (SLURM_NTASKS where srun lacks it: see
//              process_launcher.hpp's world_size_variable), SLURM_LOCALID; MASTER_ADDR and
//              MASTER_PORT are the job script's to export (srun sets no rendezvous address), e.g.
//              MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
//
// The rendezvous port is MASTER_PORT, except under torchrun's agent store
// (TORCHELASTIC_USE_AGENT_STORE=True, PyTorch 2.4 and later), where torchrun's own TCPStore
// listens on MASTER_PORT and tpx takes MASTER_PORT + 1; TPX_RENDEZVOUS_PORT, when set, wins.
//
// srun's set counts only in a job step (process_launcher.hpp's srun_step_variable): a batch
// script's own process has SLURM_PROCID=0 and the allocation's SLURM_NTASKS but is no task, and
// is refused rather than left waiting for tasks that never start.
// RANK wins when both sets are present (torchrun inside a SLURM allocation). Every value is
// checked: a missing variable, a value that is not a whole number, a rank outside the world or a
// port outside 1..65535 throws std::invalid_argument naming the variable, its value and the
// launcher it was read for, rather than a rank waiting forever for a world that never forms.
#pragma once

#include <charconv>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "tpx/launch/process_launcher.hpp"

namespace tpx {

struct launch_environment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;  // where rank 0 listens: a host name or an address
  int rendezvous_port = 0;  // and on which port
  std::string port_origin;  // how that port was chosen, for messages: "MASTER_PORT", ...
  std::string launcher;     // "torchrun" or "srun": which variables these came from
};

namespace detail {

class launch_variables {
 public:
  using lookup = std::function<const char*(const char*)>;
  launch_variables(lookup get, std::string launcher)
      : get_(std::move(get)), launcher_(std::move(launcher)) {}

  // The variable as an int in [low, high].
  int whole(const char* name, int low, int high) const {
    const char* text = get_(name);
    if (text == nullptr || *text == '\0') fail(std::string(name) + " is not set");
    int value = 0;
    const std::string_view view(text);
    const auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), value);
    if (error != std::errc{} || end != view.data() + view.size() || value < low || value > high) {
      fail(std::string(name) + "='" + text + "' is not a whole number from " + std::to_string(low) +
           " to " + std::to_string(high));
    }
    return value;
  }

  std::string text(const char* name) const {
    const char* value = get_(name);
    if (value == nullptr || *value == '\0') fail(std::string(name) + " is not set");
    return value;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("tpx: cannot join a " + launcher_ + " launch: " + what);
  }

 private:
  lookup get_;
  std::string launcher_;
};

}  // namespace detail

// The launch this process belongs to, from `get` (the process environment by default; tests pass
// a table).
inline launch_environment launch_environment_from(
    const std::function<const char*(const char*)>& get = [](const char* name) {
      return std::getenv(name);
    }) {
  const bool torchrun = get("RANK") != nullptr;
  if (!torchrun && srun_step_variable(get) == nullptr) {
    if (get("SLURM_PROCID") != nullptr)
      throw std::invalid_argument(
          "tpx: not started by a multi-process launcher: SLURM_PROCID is set, but neither "
          "SLURM_STEP_ID nor SLURM_STEPID: a SLURM batch script's own process, not a task of "
          "srun (start the program with srun)");
    throw std::invalid_argument(
        "tpx: not started by a multi-process launcher: neither RANK (torchrun) nor SLURM_PROCID "
        "(srun) is set");
  }
  launch_environment env;
  env.launcher = torchrun ? "torchrun" : "srun";
  const detail::launch_variables vars(get, env.launcher);
  constexpr int most = 1 << 24;
  const auto launcher = torchrun ? process_launcher::torchrun : process_launcher::srun;
  env.world_size = vars.whole(world_size_variable(launcher, get), 1, most);
  env.rank = vars.whole(torchrun ? "RANK" : "SLURM_PROCID", 0, env.world_size - 1);
  env.local_rank = vars.whole(torchrun ? "LOCAL_RANK" : "SLURM_LOCALID", 0, env.world_size - 1);
  env.master_addr = vars.text("MASTER_ADDR");
  const char* agent_store = get("TORCHELASTIC_USE_AGENT_STORE");
  if (get("TPX_RENDEZVOUS_PORT") != nullptr) {
    env.rendezvous_port = vars.whole("TPX_RENDEZVOUS_PORT", 1, 65535);
    env.port_origin = "TPX_RENDEZVOUS_PORT";
  } else if (torchrun && agent_store != nullptr && std::string_view(agent_store) == "True") {
    env.rendezvous_port = vars.whole("MASTER_PORT", 1, 65534) + 1;
    env.port_origin = "MASTER_PORT + 1, as torchrun's agent store holds MASTER_PORT";
  } else {
    env.rendezvous_port = vars.whole("MASTER_PORT", 1, 65535);
    env.port_origin = "MASTER_PORT";
  }
  return env;
}

}  // namespace tpx

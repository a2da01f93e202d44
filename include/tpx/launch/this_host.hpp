// tpx::this_host(): the name of the machine this process runs on, as messages name it ("world
// rank 3 (host node1)"): what a cluster user needs to find a failing rank. gethostname, or
// "this host" where the system will not say.
#pragma once

#include <unistd.h>

#include <string>

namespace tpx {

inline std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "this host";
  return name;
}

}  // namespace tpx

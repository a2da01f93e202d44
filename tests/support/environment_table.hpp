// A table of environment variables standing in for the process's, for the functions that read a
// launcher's variables through a lookup (launch/launch_environment.hpp, started_by_mpi.hpp,
// process_launcher.hpp): lookup_in(table) answers as std::getenv would for that environment.
// The table must outlive the lookup.
#pragma once

#include <functional>
#include <map>
#include <string>

using environment_table = std::map<std::string, std::string>;

inline std::function<const char*(const char*)> lookup_in(const environment_table& table) {
  return [&table](const char* name) -> const char* {
    const auto found = table.find(name);
    return found == table.end() ? nullptr : found->second.c_str();
  };
}

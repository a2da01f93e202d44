// message_of(f): what f throws, as its what() text, or "" when it returns: how the tests of
// failures (tests/unit/spmd_test.cpp, spmd_resources_test.cpp) compare whole error messages.
#pragma once

#include <exception>
#include <functional>
#include <string>

inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

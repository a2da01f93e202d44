// allocation_error: a failed allocation of a tensor's elements that says how much it asked for.
//
// A rank that runs out of memory throws std::bad_alloc, whose what() is "std::bad_alloc": the
// user learns neither what was being allocated nor how big it was. The memory spaces
// (host_space.hpp) turn a failed allocation of a tensor's elements into this error, a
// std::bad_alloc still (code that catches bad_alloc keeps working) whose what() reads
// "cannot allocate 4.00 GiB (1073741824 elements of 4 bytes) for a tensor in host memory", and
// spmd adds which rank it was (spmd.hpp). The message lives in a std::runtime_error, whose copy
// never throws, as an exception's copy must not.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>

namespace tpx {

class allocation_error : public std::bad_alloc {
 public:
  // `count` elements of `element_bytes` each, for a tensor in `where` ("host memory").
  allocation_error(std::size_t count, std::size_t element_bytes, const char* where)
      : message_(describe(count, element_bytes, where)) {}

  const char* what() const noexcept override { return message_.what(); }

 private:
  static std::string describe(std::size_t count, std::size_t element_bytes, const char* where) {
    const double bytes = static_cast<double>(count) * static_cast<double>(element_bytes);
    constexpr const char* units[] = {"KiB", "MiB", "GiB"};
    int unit = 0;  // the largest that leaves at least 1 of it (or KiB)
    while (unit < 2 && bytes >= std::ldexp(1.0, 10 * (unit + 2))) ++unit;
    char size[32];
    std::snprintf(size, sizeof size, "%.2f %s", std::ldexp(bytes, -10 * (unit + 1)), units[unit]);
    return "cannot allocate " + std::string(size) + " (" + std::to_string(count) + " elements of " +
           std::to_string(element_bytes) + " bytes) for a tensor in " + where;
  }

  std::runtime_error message_;
};

}  // namespace tpx

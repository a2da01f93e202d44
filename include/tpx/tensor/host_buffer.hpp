// host_buffer<T>: the storage of host_space (tensor/host_space.hpp), a std::vector whose
// elements can be left unwritten when the next thing to happen to them is being overwritten.
//
// std::vector<float>(n) value-initializes, that is writes n zeros, and most tensors tpx makes are
// outputs that a GEMM (beta = 0), an elementwise op or a collective then overwrites whole: the
// zeros cost a pass over memory that shows in profiles of small steps (5-7 % of the trainer's).
// With for_overwrite_allocator, host_buffer<T>(n) default-initializes instead (nothing, for
// float and int), like C++20's std::make_unique_for_overwrite, and host_buffer<T>(n, T{}) is the
// zero-filled buffer. Every other use is std::vector's.
#pragma once

#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace tpx {

// std::allocator, except that constructing an element without arguments default-initializes it.
template <class T>
struct for_overwrite_allocator : std::allocator<T> {
  using value_type = T;

  for_overwrite_allocator() = default;
  template <class U>
  for_overwrite_allocator(const for_overwrite_allocator<U>&) noexcept {}  // NOLINT: rebinding

  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    std::construct_at(p, std::forward<Args>(args)...);
  }
};

template <class T>
using host_buffer = std::vector<T, for_overwrite_allocator<T>>;

}  // namespace tpx

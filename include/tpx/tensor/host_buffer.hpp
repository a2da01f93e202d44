// host_buffer<T>: the storage of host_space (tensor/host_space.hpp), a std::vector whose
// elements can be left unwritten when the next thing to happen to them is being overwritten.
//
// std::vector<float>(n) value-initializes, that is writes n zeros, and most tensors tpx makes are
// outputs that a GEMM (beta = 0), an elementwise op or a collective then overwrites whole: the
// zeros cost a pass over memory that shows in profiles of small steps (5-7 % of the trainer's).
// With for_overwrite_allocator, host_buffer<T>(n) default-initializes instead (nothing, for
// float and int), like C++20's std::make_unique_for_overwrite, and host_buffer<T>(n, T{}) is the
// zero-filled buffer. Every other use is std::vector's. The allocator also counts its bytes on
// a memory_meter when given one (host_space gives the rank's: tensor/memory_meter.hpp); the
// meter travels with the buffer when it is moved, copied or swapped. Its memory comes from
// host_block_cache (tensor/host_block_cache.hpp), which keeps large freed blocks for the next
// buffer of their size instead of returning them to the system every step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpx/tensor/host_block_cache.hpp"
#include "tpx/tensor/memory_meter.hpp"

namespace tpx {

// std::allocator, except that constructing an element without arguments default-initializes it,
// that its blocks come from host_block_cache, and that it counts what it holds on `meter`, if any.
template <class T>
struct for_overwrite_allocator : std::allocator<T> {
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;

  memory_meter* meter = nullptr;

  for_overwrite_allocator() = default;
  explicit for_overwrite_allocator(memory_meter* m) noexcept : meter(m) {}
  template <class U>
  for_overwrite_allocator(const for_overwrite_allocator<U>& other) noexcept  // NOLINT: rebinding
      : meter(other.meter) {}

  T* allocate(std::size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    T* p = static_cast<T*>(host_block_cache::instance().take(n * sizeof(T)));
    if (meter != nullptr) meter->add(static_cast<std::int64_t>(n * sizeof(T)));
    return p;
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (meter != nullptr) meter->remove(static_cast<std::int64_t>(n * sizeof(T)));
    host_block_cache::instance().give(p, n * sizeof(T));
  }
  template <class U>
  friend bool operator==(const for_overwrite_allocator& a,
                         const for_overwrite_allocator<U>& b) noexcept {
    return a.meter == b.meter;
  }

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

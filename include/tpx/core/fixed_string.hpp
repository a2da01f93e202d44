// fixed_string: a string usable as a template argument and built at compile time.
//
// Dims and mesh axes carry their names as fixed_strings, so tpx can compose a sentence such as
// "matmul: contraction dim D is sharded over mesh axis X on the left ..." during compilation
// and put it into the compiler's diagnostic (see compile_error.hpp), and can print plans and
// shardings ("[B_X, D_Y]{U_X}") without any run-time type information.
#pragma once

#include <cstddef>

namespace tpx {

template <std::size_t N>
struct fixed_string {
  char data[N + 1]{};

  constexpr fixed_string() = default;
  constexpr fixed_string(const char (&text)[N + 1]) {  // NOLINT: implicit from a literal
    for (std::size_t i = 0; i <= N; ++i) data[i] = text[i];
  }
  static constexpr std::size_t size() { return N; }
  constexpr const char* c_str() const { return data; }
  template <std::size_t M>
  constexpr bool operator==(const fixed_string<M>& other) const {
    if (N != M) return false;
    for (std::size_t i = 0; i < N; ++i)
      if (data[i] != other.data[i]) return false;
    return true;
  }
};
template <std::size_t N>
fixed_string(const char (&)[N]) -> fixed_string<N - 1>;

template <std::size_t A, std::size_t B>
constexpr fixed_string<A + B> operator+(const fixed_string<A>& a, const fixed_string<B>& b) {
  fixed_string<A + B> joined;
  for (std::size_t i = 0; i < A; ++i) joined.data[i] = a.data[i];
  for (std::size_t i = 0; i <= B; ++i) joined.data[A + i] = b.data[i];
  return joined;
}
template <std::size_t A, std::size_t B>
constexpr fixed_string<A + B - 1> operator+(const fixed_string<A>& a, const char (&b)[B]) {
  return a + fixed_string<B - 1>(b);
}
template <std::size_t A, std::size_t B>
constexpr fixed_string<A - 1 + B> operator+(const char (&a)[A], const fixed_string<B>& b) {
  return fixed_string<A - 1>(a) + b;
}

}  // namespace tpx

namespace tpx {

// A string of run-time length (at most Capacity) built in constexpr code: shardings and plans are
// described by appending names in loops, then frozen into a fixed_string of the exact length by
// freeze<builder>() so that the result can travel as a template argument.
template <std::size_t Capacity>
struct static_string {
  char data[Capacity + 1]{};
  std::size_t length = 0;

  constexpr static_string& operator+=(const char* text) {
    while (*text != '\0' && length < Capacity) data[length++] = *text++;
    return *this;
  }
  template <std::size_t N>
  constexpr static_string& operator+=(const fixed_string<N>& text) {
    return *this += text.c_str();
  }
  constexpr std::size_t size() const { return length; }
  constexpr const char* c_str() const { return data; }
};

// freeze<f>(): the static_string that the constexpr callable f returns, as a fixed_string.
template <auto Builder>
constexpr auto freeze() {
  constexpr auto text = Builder();
  fixed_string<text.size()> frozen;
  for (std::size_t i = 0; i < text.size(); ++i) frozen.data[i] = text.data[i];
  return frozen;
}

}  // namespace tpx

// compile_error<"sentence">: how tpx rejects a program, with the reason spelled out in the first
// error line the compiler prints.
//
// C++20's static_assert only takes a literal message, so it cannot say *which* dim or mesh axis
// is at fault. A rejected operation instead names compile_error with a fixed_string composed from
// the names of the dims and axes involved, `compile_error<"tpx: ...">{}`, and the compiler is
// made to print that sentence in its first error line, in the way each compiler can:
//
//   - in C++26 (user-generated static_assert messages, P2741: g++ >= 14 and clang >= 17 with
//     -std=c++26), a static_assert whose message is the sentence:
//       error: static assertion failed: tpx: tensor [B_X, D_X]: mesh axis X shards both dim B ...
//   - g++ (and nvcc's front end): an incomplete type whose template argument is the sentence,
//     which g++ prints as a string:
//       error: invalid use of incomplete type 'struct tpx::compile_error<tpx::fixed_string<63>{
//       "tpx: tensor [B_X, D_X]: mesh axis X shards both dim B and dim D"}>'
//   - clang >= 16 prints a character array argument as a string only up to 32 characters, so it
//     meets an incomplete type whose arguments are the sentence cut into such pieces, at spaces:
//       error: implicit instantiation of undefined template 'tpx::detail::sentence<
//       text_piece{"tpx: tensor [B_X, D_X]: mesh"}, text_piece{" axis X shards both dim B and"},
//       text_piece{" dim D (an axis can shard one"}, text_piece{" dim only)"}>'
//   - clang 14 and 15 print any such argument as character codes, so a static_assert with a
//     literal message says where to read the sentence (g++, clang >= 16, or -std=c++26).
//
// Operations also expose the same check as a constexpr bool (tpx::can_matmul and friends) so
// generic code and tests can ask whether a combination is legal without failing to compile.
#pragma once

#include <cstddef>
#include <utility>

#include "tpx/core/fixed_string.hpp"
#include "tpx/core/type_list.hpp"

#if defined(__NVCC__) || defined(__CUDACC__)
#define TPX_COMPILE_ERROR_FORM 0  // incomplete type
#elif defined(__cpp_static_assert) && __cpp_static_assert >= 202306L
#define TPX_COMPILE_ERROR_FORM 1  // static_assert with the sentence as its message
#elif defined(__clang__) && __clang_major__ < 16
#define TPX_COMPILE_ERROR_FORM 2  // static_assert with a literal pointing elsewhere
#elif defined(__clang__)
#define TPX_COMPILE_ERROR_FORM 3  // incomplete type, the sentence in pieces
#else
#define TPX_COMPILE_ERROR_FORM 0
#endif

namespace tpx {

#if TPX_COMPILE_ERROR_FORM == 1

namespace detail {
// The message of a static_assert (P2741): anything with constant size() and data().
template <fixed_string Text>
struct static_assert_message {
  static constexpr std::size_t size() { return Text.size(); }
  static constexpr const char* data() { return Text.c_str(); }
};
}  // namespace detail

template <fixed_string Reason>
struct compile_error {
  static_assert(always_false_v<compile_error>, detail::static_assert_message<Reason>());
};

#elif TPX_COMPILE_ERROR_FORM == 2

template <fixed_string Reason>
struct compile_error {
  static_assert(always_false_v<compile_error>,
                "tpx rejected this program: its reason is the string below, which clang "
                "before 16 prints as character codes; g++, clang >= 16 or -std=c++26 print it");
};

#elif TPX_COMPILE_ERROR_FORM == 3

namespace detail {
inline constexpr std::size_t piece_length = 30;  // clang prints shorter arrays than 32 as strings

// A piece of exactly N characters: clang prints an array as a string only when its one NUL is
// the last element.
template <std::size_t N>
struct text_piece {
  char text[N + 1]{};
  constexpr explicit text_piece(const char* from) {
    for (std::size_t i = 0; i < N; ++i) text[i] = from[i];
    // Written although it is already zero: clang's constant evaluator grows an array's written
    // elements by doubling, so for N a power of two the NUL would stay an unwritten "filler" and
    // clang would see no terminator and print the piece as character codes.
    text[N] = '\0';
  }
};

template <std::size_t N>
constexpr text_piece<N> make_piece(const char* from) {  // its type printed plainly, text_piece<28>
  return text_piece<N>(from);
}

// Where each piece of Text starts: at most piece_length characters each, cut before a space
// where there is one, so that the pieces read as words and concatenate to Text.
template <fixed_string Text>
struct pieces_of {
  struct cuts {
    std::size_t start[Text.size() + 2]{};
    std::size_t count = 0;
  };
  static constexpr cuts value = [] {
    cuts c;
    std::size_t at = 0;
    while (at < Text.size()) {
      c.start[c.count++] = at;
      std::size_t end = at + piece_length;
      if (end >= Text.size()) {
        end = Text.size();
      } else {
        std::size_t space = end;
        while (space > at + 1 && Text.c_str()[space] != ' ') --space;
        if (space > at + 1) end = space;
      }
      at = end;
    }
    c.start[c.count] = Text.size();
    return c;
  }();
};

template <auto... Pieces>
struct sentence;  // incomplete on purpose: the error names it, pieces included

template <fixed_string Text, class Indices>
struct sentence_of;
template <fixed_string Text, std::size_t I>
struct piece_at {
  static constexpr auto& cut = pieces_of<Text>::value;
  static constexpr auto value = make_piece<cut.start[I + 1] - cut.start[I]>(Text.c_str() + cut.start[I]);
};
template <fixed_string Text, std::size_t... I>
struct sentence_of<Text, std::index_sequence<I...>> {
  using type = sentence<piece_at<Text, I>::value...>;
};
}  // namespace detail

template <fixed_string Reason>
struct compile_error {
  typename detail::sentence_of<
      Reason, std::make_index_sequence<detail::pieces_of<Reason>::value.count>>::type reason;
};

#else

template <fixed_string Reason>
struct compile_error;  // incomplete on purpose: the error names it, sentence included

#endif

}  // namespace tpx

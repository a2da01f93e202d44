// Elementwise operations on tensors: apply a kernels/ functor to every element of this rank's
// block, with the sharding checked at compile time.
//
//   auto g  = tpx::map(tpx::kernels::gelu{}, a);              // same sharding as a
//   auto y  = tpx::map(tpx::kernels::add{}, x, o);            // x and o: the same sharding
//   auto s  = tpx::add(partial_a, partial_b);                 // sums of partial sums are fine
//   auto d  = a - b;  auto e = 0.5f * (a + b);                 // tpx::sub, tpx::add, tpx::scale
//   auto hb = tpx::cast<tpx::bf16>(h);                        // element type only
//   tpx::map_into(s, fn, s);  tpx::assign(out, y);            // into an existing tensor
//
// Operands must have the same sharding: mixing [B_X, D_Y] with [B_X, D] would pair elements of
// different global indices, so it is a compile error naming both (reshard one first). map
// refuses partial sums: gelu of a partial sum is not a partial sum of gelu. add and scale are
// linear and accept them when both operands are unreduced over the same axes.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tpx/core/compile_error.hpp"
#include "tpx/kernels/elementwise.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

namespace detail {
template <AnyTensor A, AnyTensor B>
constexpr bool same_sharding() {
  using dims_a = typename A::dims;
  using dims_b = typename B::dims;
  return std::is_same_v<dims_a, dims_b> &&
         std::is_same_v<typename A::unreduced, typename B::unreduced> &&
         std::is_same_v<typename A::space, typename B::space>;
}

template <AnyTensor A, AnyTensor... Rest>
constexpr void check_same_sharding() {
  (
      [] {
        if constexpr (!same_sharding<A, Rest>())
          compile_error<"tpx: elementwise operation on " + A::notation + " and " + Rest::notation +
                        ": the shardings differ (reshard one operand first)">{};
      }(),
      ...);
}
}  // namespace detail

// out[i] = fn(a[i], rest[i]...), stored as Out (by default a's element type).
template <class Out = void, class Fn, AnyTensor A, AnyTensor... Rest>
auto map(const Fn& fn, const A& a, const Rest&... rest) {
  detail::check_same_sharding<A, Rest...>();
  if constexpr (!std::is_same_v<typename A::unreduced, Unreduced<>>)
    compile_error<"tpx: map on " + A::notation +
                  ": a function of partial sums is not the partial sum of the function; reduce "
                  "first, or use add/scale, which are linear">{};
  using V = std::conditional_t<std::is_void_v<Out>, typename A::value_type, Out>;
  using Result =
      tensor_with_t<BasicTensor<typename A::space, V>, typename A::dims, typename A::unreduced>;
  Result out(a.context(), typename Result::shape_type(a.global_extents()), for_overwrite);
  A::space::transform(a.context(), a.size(), fn, out.data(), a.data(), rest.data()...);
  return out;
}

// out[i] = fn(a[i], rest[i]...) into the existing tensor out, whose buffer stays: for state that
// a step updates in place, and for the inputs and outputs of a step recorded once and replayed
// (spmd/recorded_step.hpp), which must keep their buffers. out may be one of the operands.
template <class Fn, AnyTensor Out, AnyTensor A, AnyTensor... Rest>
void map_into(Out& out, const Fn& fn, const A& a, const Rest&... rest) {
  detail::check_same_sharding<Out, A, Rest...>();
  if constexpr (!std::is_same_v<typename A::unreduced, Unreduced<>>)
    compile_error<"tpx: map_into on " + A::notation +
                  ": a function of partial sums is not the partial sum of the function; reduce "
                  "first">{};
  const auto same_extents = [&](const auto& t) {
    return t.global_extents() == out.global_extents();
  };
  if (!same_extents(a) || !(same_extents(rest) && ...))
    throw std::invalid_argument("tpx: map_into on " + std::string(Out::notation.c_str()) +
                                ": an operand's extents differ from the output's");
  Out::space::transform(a.context(), a.size(), fn, out.data(), a.data(), rest.data()...);
}

// out's elements = a's, in out's buffer (map_into with the identity). Elementwise ops compute in
// float, so integer tensors are not assigned this way (their values would pass through float).
template <AnyTensor Out, AnyTensor A>
void assign(Out& out, const A& a) {
  static_assert(std::is_same_v<typename Out::value_type, typename A::value_type> &&
                    !std::is_integral_v<typename A::value_type>,
                "tpx: assign: out and a must have the same floating-point element type");
  map_into(out, kernels::identity{}, a);
}

// a + b, for partial sums too (both unreduced over the same axes).
template <AnyTensor A, AnyTensor B>
A add(const A& a, const B& b) {
  detail::check_same_sharding<A, B>();
  A out(a.context(), a.shape(), for_overwrite);
  A::space::transform(a.context(), a.size(), kernels::add{}, out.data(), a.data(), b.data());
  return out;
}

// a - b, for partial sums too (both unreduced over the same axes).
template <AnyTensor A, AnyTensor B>
A sub(const A& a, const B& b) {
  detail::check_same_sharding<A, B>();
  A out(a.context(), a.shape(), for_overwrite);
  A::space::transform(a.context(), a.size(), kernels::sub{}, out.data(), a.data(), b.data());
  return out;
}

// s * a, for partial sums too.
template <AnyTensor A>
A scale(const A& a, float s) {
  A out(a.context(), a.shape(), for_overwrite);
  A::space::transform(a.context(), a.size(), kernels::scale{s}, out.data(), a.data());
  return out;
}

// Operators, for tpx tensors only (both operands, or the tensor and an arithmetic scalar): local
// elementwise work, never communication. They are add, sub and scale, so differently sharded
// operands are the same compile error ("the shardings differ (reshard one operand first)").
template <AnyTensor A, AnyTensor B>
A operator+(const A& a, const B& b) {
  return add(a, b);
}
template <AnyTensor A, AnyTensor B>
A operator-(const A& a, const B& b) {
  return sub(a, b);
}
template <AnyTensor A, class S>
requires std::is_arithmetic_v<S>
A operator*(const A& a, S s) {
  return scale(a, static_cast<float>(s));
}
template <class S, AnyTensor A>
requires std::is_arithmetic_v<S>
A operator*(S s, const A& a) {
  return scale(a, static_cast<float>(s));
}

// The same tensor with elements stored as To (rounded to nearest even for bf16).
template <class To, AnyTensor A>
auto cast(const A& a) {
  using Result =
      tensor_with_t<BasicTensor<typename A::space, To>, typename A::dims, typename A::unreduced>;
  Result out(a.context(), typename Result::shape_type(a.global_extents()), for_overwrite);
  A::space::transform(a.context(), a.size(), kernels::identity{}, out.data(), a.data());
  return out;
}

// A temporary cast to its own element type is that temporary, moved: no copy.
template <class To, AnyTensor A>
  requires(!std::is_reference_v<A> && !std::is_const_v<A> &&
           std::is_same_v<To, typename A::value_type>)
A cast(A&& a) {
  return std::move(a);
}

}  // namespace tpx

// compile_error<"sentence">: how tpx rejects a program, with the reason spelled out.
//
// C++20's static_assert only takes a literal message, so it cannot say *which* dim or mesh axis
// is at fault. Instead, a rejected operation instantiates compile_error with a fixed_string
// composed from the names of the dims and axes involved; the compiler prints that template
// argument in the first line of the diagnostic:
//
//   In instantiation of 'struct tpx::compile_error<fixed_string<..>{"tpx: tensor [B_X, D_X]:
//   mesh axis X shards both dim B and dim D"}>'
//   error: static assertion failed: tpx: sharding error: the reason is in the line above
//
// Operations also expose the same check as a constexpr bool (tpx::can_matmul and friends) so
// generic code and tests can ask whether a combination is legal without failing to compile.
#pragma once

#include "tpx/core/fixed_string.hpp"
#include "tpx/core/type_list.hpp"

namespace tpx {

template <fixed_string Reason>
struct compile_error {
  static_assert(always_false_v<compile_error>,
                "tpx: sharding error: the reason is in the line above");
};

}  // namespace tpx

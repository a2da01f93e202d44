// TPX_DETAIL_FOR_EACH(m, a, b, c) expands to m(a) m(b) m(c): the one preprocessor device tpx
// uses, so that TPX_DIMS(B, D, F) and TPX_MESH_AXES(X, Y) can declare a list of names in one
// line. Standard C++20 __VA_OPT__ recursion; up to 256 names.
#pragma once

#define TPX_DETAIL_PARENS ()
#define TPX_DETAIL_EXPAND(...) \
  TPX_DETAIL_EXPAND3(TPX_DETAIL_EXPAND3(TPX_DETAIL_EXPAND3(TPX_DETAIL_EXPAND3(__VA_ARGS__))))
#define TPX_DETAIL_EXPAND3(...) \
  TPX_DETAIL_EXPAND2(TPX_DETAIL_EXPAND2(TPX_DETAIL_EXPAND2(TPX_DETAIL_EXPAND2(__VA_ARGS__))))
#define TPX_DETAIL_EXPAND2(...) \
  TPX_DETAIL_EXPAND1(TPX_DETAIL_EXPAND1(TPX_DETAIL_EXPAND1(TPX_DETAIL_EXPAND1(__VA_ARGS__))))
#define TPX_DETAIL_EXPAND1(...) __VA_ARGS__

#define TPX_DETAIL_FOR_EACH(macro, ...) \
  __VA_OPT__(TPX_DETAIL_EXPAND(TPX_DETAIL_FOR_EACH_STEP(macro, __VA_ARGS__)))
#define TPX_DETAIL_FOR_EACH_STEP(macro, first, ...) \
  macro(first) __VA_OPT__(TPX_DETAIL_FOR_EACH_AGAIN TPX_DETAIL_PARENS(macro, __VA_ARGS__))
#define TPX_DETAIL_FOR_EACH_AGAIN() TPX_DETAIL_FOR_EACH_STEP

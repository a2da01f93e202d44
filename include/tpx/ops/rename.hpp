// rename<From, To>(std::move(t)): the same tensor with its dim From called To, split as before.
//
//   auto k = tpx::rename<T, S>(std::move(k_proj));   // [B_X, T, H_Y, E] -> [B_X, S, H_Y, E]
//
// Names are how tpx pairs dims across operands, so one tensor sometimes needs another name for a
// dim: attention's keys come out of a projection over the sequence dim T, and q *_E k must see
// them along S, or the scores would hold T twice. Renaming changes only the type: the elements,
// extents and splits stay, and the tensor's buffer moves into the result, so rename takes its
// tensor by value from an rvalue; a tensor that must stay is copied by the caller, visibly. An
// unknown dim, or a name the tensor already has, is a compile error naming both.
#pragma once

#include <type_traits>
#include <utility>

#include "tpx/core/compile_error.hpp"
#include "tpx/core/type_list.hpp"
#include "tpx/sharding/transforms.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx {

namespace detail {

template <class D, template <class...> class From, template <class...> class To>
struct renamed_dim {
  using type = D;
};
template <template <class...> class From, template <class...> class To, class... Axes>
struct renamed_dim<From<Axes...>, From, To> {
  using type = To<Axes...>;
};

template <class Dims, template <class...> class From, template <class...> class To>
struct renamed_dims;
template <class... Dims, template <class...> class From, template <class...> class To>
struct renamed_dims<type_list<Dims...>, From, To> {
  using type = type_list<typename renamed_dim<Dims, From, To>::type...>;
};

}  // namespace detail

template <template <class...> class From, template <class...> class To, AnyTensor Tn>
auto rename(Tn&& t) {
  using Plain = std::remove_cvref_t<Tn>;
  using Dims = typename Plain::dims;
  using Names = typename remove_all_axes<Dims>::type;
  if constexpr (std::is_lvalue_reference_v<Tn>) {
    compile_error<"tpx: rename<" + From<>::name + ", " + To<>::name + "> of tensor " +
                  Plain::notation +
                  ": rename takes over the elements of the tensor; pass std::move(t), or a copy">{};
  } else if constexpr (!contains_v<From<>, Names>) {
    compile_error<"tpx: rename<" + From<>::name + ", " + To<>::name + ">: tensor " +
                  Plain::notation + " has no dim " + From<>::name>{};
  } else if constexpr (!std::is_same_v<From<>, To<>> && contains_v<To<>, Names>) {
    compile_error<"tpx: rename<" + From<>::name + ", " + To<>::name + ">: tensor " +
                  Plain::notation + " already has a dim " + To<>::name>{};
  } else {
    using Result = tensor_with_t<Plain, typename detail::renamed_dims<Dims, From, To>::type,
                                 typename Plain::unreduced>;
    return Result(relabel_t{}, std::move(t));
  }
}

}  // namespace tpx

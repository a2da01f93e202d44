// GELU of a product and its backward, each one GEMM whose store applies the GELU where the space
// can fuse it: an MLP's up projection GELU(h *_D W_in) and the gradient at its input, which the
// down projection's backward product dG = dOut *_D W_out feeds.
//
//   auto up = tpx::nn::gelu_product<D>(h, w_in);                // up.pre = h *_D w_in
//                                                               // up.out = GELU(up.pre)
//   auto da = tpx::nn::gelu_product_backward<D>(up.pre, dout, w_out);
//                                                               // (dout *_D w_out) * GELU'(up.pre)
//
// The products are einsum's (ops/einsum.hpp): the same plan, collectives and compile-time checks,
// the same result type. Unfused, the activation costs passes of its own over [rows, F]: the
// forward reads the product back to write GELU of it; the backward writes dG, then reads it and
// the pre-activation to write dA. Fused, the GPU's GEMM stores GELU(x) and x at once (cuBLASLt's
// GELU_AUX epilogue) and multiplies by GELU' as it stores dA (DGELU), reading the pre-activation
// (device_space's gemm_gelu, gemm_gelu_backward). The host space runs the GEMM and then the
// elementwise loop; both are kernels::gelu and kernels::gelu_backward, the functors tpx::map runs,
// so fused and unfused agree to rounding. A product with batch dims (several GEMMs) stores plainly
// and then applies the functor.
//
// The types say when fusing is sound. GELU of a partial sum is not the partial sum of GELU, so
// gelu_product refuses a product that is unreduced over an axis (reduce it and use tpx::map).
// The backward multiplies the product by a factor per element, which is linear, so its product
// may be a partial sum: the result is then unreduced over the same axes. Its pre-activation must
// be the whole values, split as the product is.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tpx/core/compile_error.hpp"
#include "tpx/kernels/elementwise.hpp"
#include "tpx/ops/einsum.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::nn {

// GELU's input (kept for the backward pass) and output.
template <AnyTensor Result>
struct gelu_activation {
  Result pre;
  Result out;
};

namespace detail {

template <class Traits, AnyTensor L, AnyTensor R>
constexpr bool plannable_v = Traits::possible &&
                             std::is_same_v<typename L::space, typename R::space> &&
                             std::is_same_v<typename L::value_type, typename R::value_type>;

template <class... Contracted, AnyTensor L, AnyTensor R>
auto gelu_product(const L& x, const R& w) {
  using traits = einsum_traits<L, R, Contracted...>;
  if constexpr (!plannable_v<traits, L, R>) {
    return tpx::detail::einsum_checked<Contracted...>(x, w);  // its sentence says why not
  } else {
    using Product = typename traits::result;
    using Space = typename Product::space;
    using T = typename Product::value_type;
    if constexpr (!std::is_same_v<typename Product::unreduced, Unreduced<>>) {
      compile_error<"tpx: gelu_product " + L::notation + " *_" + traits::label + " " + R::notation +
                    ": the product " + Product::notation +
                    " is a partial sum, and GELU of partial sums is not the partial sum of GELU; "
                    "reduce the product (tpx::einsum, then reshard) and apply tpx::map">{};
    } else {
      std::optional<Product> pre;
      Product out = tpx::detail::einsum_impl<traits>(
          x, w, [&pre](Product& y, const tpx::detail::local_products<T>& p) {
            pre.emplace(y.context(), typename Product::shape_type(y.global_extents()),
                        for_overwrite);
            if (p.batch == 1) {
              Space::gemm_gelu(y.context(), p.trans_a, p.trans_b, p.m, p.n, p.k, p.a, p.lda, p.b,
                               p.ldb, y.data(), pre->data());
            } else {
              tpx::detail::plain_products{}(*pre, p);
              Space::transform(y.context(), y.size(), kernels::gelu{}, y.data(),
                               std::as_const(*pre).data());
            }
          });
      return gelu_activation<Product>{std::move(*pre), std::move(out)};
    }
  }
}

template <class... Contracted, AnyTensor Pre, AnyTensor L, AnyTensor R>
auto gelu_product_backward(const Pre& pre, const L& dy, const R& w) {
  using traits = einsum_traits<L, R, Contracted...>;
  if constexpr (!plannable_v<traits, L, R>) {
    return tpx::detail::einsum_checked<Contracted...>(dy, w);  // its sentence says why not
  } else {
    using Product = typename traits::result;
    using Space = typename Product::space;
    using T = typename Product::value_type;
    if constexpr (!std::is_same_v<typename Pre::dims, typename Product::dims> ||
                  !std::is_same_v<typename Pre::unreduced, Unreduced<>> ||
                  !std::is_same_v<typename Pre::space, Space> ||
                  !std::is_same_v<typename Pre::value_type, T>) {
      compile_error<"tpx: gelu_product_backward: the pre-activation " + Pre::notation +
                    " must be whole values with the dims, splits, element type and memory space "
                    "of the product " +
                    L::notation + " *_" + traits::label + " " + R::notation + " -> " +
                    Product::notation>{};
    } else {
      return tpx::detail::einsum_impl<traits>(
          dy, w, [&pre](Product& y, const tpx::detail::local_products<T>& p) {
            if (y.global_extents() != pre.global_extents())
              throw std::invalid_argument(
                  "tpx: gelu_product_backward: the pre-activation " +
                  std::string(Pre::notation.c_str()) + " has extents " +
                  tpx::detail::extents_text(pre.global_extents()) + ", the product " +
                  Product::notation.c_str() + " " + tpx::detail::extents_text(y.global_extents()) +
                  " (rank " + std::to_string(y.context().world_rank()) + ")");
            if (p.batch == 1) {
              Space::gemm_gelu_backward(y.context(), p.trans_a, p.trans_b, p.m, p.n, p.k, p.a,
                                        p.lda, p.b, p.ldb, pre.data(), y.data());
            } else {
              tpx::detail::plain_products{}(y, p);
              Space::transform(y.context(), y.size(), kernels::gelu_backward{}, y.data(),
                               pre.data(), std::as_const(y).data());
            }
          });
    }
  }
}

}  // namespace detail

// GELU(x *_{C, ...} w) and the product itself (GELU's input, for the backward pass).
template <Dim C, Dim... Cs, AnyTensor L, AnyTensor R>
auto gelu_product(const L& x, const R& w) {
  return detail::gelu_product<unsplit_t<C>, unsplit_t<Cs>...>(x, w);
}
template <template <class...> class C, template <class...> class... Cs, AnyTensor L, AnyTensor R>
auto gelu_product(const L& x, const R& w) {
  return detail::gelu_product<C<>, Cs<>...>(x, w);
}

// (dy *_{C, ...} w) * GELU'(pre): the gradient at GELU's input pre, given the product that
// gives the gradient at its output.
template <Dim C, Dim... Cs, AnyTensor Pre, AnyTensor L, AnyTensor R>
auto gelu_product_backward(const Pre& pre, const L& dy, const R& w) {
  return detail::gelu_product_backward<unsplit_t<C>, unsplit_t<Cs>...>(pre, dy, w);
}
template <template <class...> class C, template <class...> class... Cs, AnyTensor Pre, AnyTensor L,
          AnyTensor R>
auto gelu_product_backward(const Pre& pre, const L& dy, const R& w) {
  return detail::gelu_product_backward<C<>, Cs<>...>(pre, dy, w);
}

}  // namespace tpx::nn

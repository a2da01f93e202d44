// The notes' FSDP + TP MLP layer (seed 001, "Combined FSDP and Tensor Parallelism"),
//   In[B_X, D_Y] *_D W_in[D_X, F_Y] *_F W_out[F_Y, D_X] -> Out[B_X, D_Y],
// forward and backward written step by step as the notes write them, with loss = sum(Out^2)/2
// (so dOut = Out). Each step's collective is asserted at compile time; the backward collectives
// are not written by hand but derived as adjoints of the forward ones (apply<adjoint_t<...>>).
// Every rank's blocks of Out, dW_in, dW_out and dIn are compared with the unsharded layer
// computed by naive loops in double, per element within 1e-5 of the same computation on
// absolute values (a bound on the rounding error of the chained products), on meshes 1x1, 2x1,
// 1x2, 2x2 and 4x2, with divisible and non-divisible extents.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <tpx/tpx.hpp>
#include <tuple>
#include <vector>

namespace {

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, D, F);

using std::is_same_v;
using tpx::adjoint_t;
using tpx::AllGather;
using tpx::ReduceScatter;
using tpx::Tensor;
using tpx::type_list;
using tpx::Unreduced;

// Row-major dense matrices in double, for the reference.
struct matrix {
  std::int64_t rows, cols;
  std::vector<double> v;
  matrix(std::int64_t r, std::int64_t c) : rows(r), cols(c), v(r * c) {}
  double& operator()(std::int64_t i, std::int64_t j) { return v[i * cols + j]; }
  double operator()(std::int64_t i, std::int64_t j) const { return v[i * cols + j]; }
};
matrix product(const matrix& a, bool ta, const matrix& b, bool tb) {
  const std::int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const std::int64_t n = tb ? b.rows : b.cols;
  matrix c(m, n);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p)
        c(i, j) += (ta ? a(p, i) : a(i, p)) * (tb ? b(j, p) : b(p, j));
  return c;
}
matrix magnitude(matrix m) {
  for (double& x : m.v) x = std::abs(x);
  return m;
}

struct reference {
  matrix out, dw_in, dw_out, din;
};
// The unsharded layer: Tmp = In W_in, Out = Tmp W_out, dOut = Out, dW_out = Tmp^T dOut,
// dTmp = dOut W_out^T, dW_in = In^T dTmp, dIn = dTmp W_in^T.
reference layer(const matrix& in, const matrix& w_in, const matrix& w_out) {
  const matrix tmp = product(in, false, w_in, false);
  const matrix out = product(tmp, false, w_out, false);
  const matrix dtmp = product(out, false, w_out, true);
  return {out, product(in, true, dtmp, false), product(tmp, true, out, false),
          product(dtmp, false, w_in, true)};
}

matrix global_values(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  matrix m(rows, cols);
  for (std::int64_t i = 0; i < rows * cols; ++i)
    m.v[i] = tpx::kernels::normal_at(seed, static_cast<std::uint64_t>(i));
  return m;
}

template <class Tn>
bool matches(const Tn& t, const matrix& want, const matrix& scale) {
  bool ok = true;
  std::int64_t at = 0;
  for (std::int64_t i = 0; i < t.local_extent(0); ++i)
    for (std::int64_t j = 0; j < t.local_extent(1); ++j, ++at) {
      const std::int64_t gi = t.local_offset(0) + i, gj = t.local_offset(1) + j;
      if (std::abs(t.local()[at] - want(gi, gj)) > 1e-5 * scale(gi, gj) + 1e-30) ok = false;
    }
  return ok;
}

}  // namespace

TEST_CASE("FSDP+TP MLP layer, step by step, equals the unsharded layer") {
  for (const auto& values : {std::tuple{8, 16, 32}, std::tuple{6, 10, 7}}) {
    // plain variables, not bindings: clang before 16 cannot capture bindings in lambdas
    const int nb = std::get<0>(values), nd = std::get<1>(values), nf = std::get<2>(values);
    const matrix in = global_values(nb, nd, 1), w_in = global_values(nd, nf, 2),
                 w_out = global_values(nf, nd, 3);
    const reference want = layer(in, w_in, w_out);
    const reference scale = layer(magnitude(in), magnitude(w_in), magnitude(w_out));
    for (const auto& values :
         {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}, std::pair{4, 2}}) {
      const int x = std::get<0>(values), y = std::get<1>(values);
      std::atomic<int> wrong{0};
      tpx::spmd(tpx::host, tpx::Mesh<X, Y>{x, y}, [&](auto& rank) {
        const auto in_s = tpx::randn<float, B<X>, D<Y>>(rank, {B(nb), D(nd)}, 1);
        const auto w_in_s = tpx::randn<float, D<X>, F<Y>>(rank, {D(nd), F(nf)}, 2);
        const auto w_out_s = tpx::randn<float, F<Y>, D<X>>(rank, {F(nf), D(nd)}, 3);

        // Forward.
        using gather_in = AllGather<Y, D<>>;     // 1. In[B_X, D] = AllGather_Y(In[B_X, D_Y])
        using gather_w_in = AllGather<X, D<>>;   // 2. W_in[D, F_Y] = AllGather_X(W_in[D_X, F_Y])
        using gather_w_out = AllGather<X, D<>>;  // 4. W_out[F_Y, D] = AllGather_X(W_out[F_Y, D_X])
        using scatter_out =
            ReduceScatter<Y, D<>>;  // 6. Out[B_X, D_Y] = ReduceScatter_Y,D(Out{U_Y})
        const auto in_full = tpx::apply<gather_in>(in_s);
        const auto w_in_full = tpx::apply<gather_w_in>(w_in_s);
        static_assert(is_same_v<decltype(in_full), const Tensor<float, B<X>, D<>>>);
        static_assert(is_same_v<decltype(w_in_full), const Tensor<float, D<>, F<Y>>>);
        // 3. Tmp[B_X, F_Y] = In[B_X, D] *_D W_in[D, F_Y]: no further communication.
        using plan3 = tpx::matmul_plan_t<decltype(in_full), decltype(w_in_full)>;
        static_assert(is_same_v<typename plan3::lhs_steps, type_list<>> &&
                      is_same_v<typename plan3::rhs_steps, type_list<>>);
        const auto tmp = tpx::matmul(in_full, w_in_full);
        static_assert(is_same_v<decltype(tmp), const Tensor<float, B<X>, F<Y>>>);
        const auto w_out_full = tpx::apply<gather_w_out>(w_out_s);
        // 5. Out[B_X, D]{U_Y} = Tmp[B_X, F_Y] *_F W_out[F_Y, D]: local, unreduced over Y.
        const auto out_partial = tpx::matmul(tmp, w_out_full);
        static_assert(
            is_same_v<decltype(out_partial), const Tensor<float, B<X>, D<>, Unreduced<Y>>>);
        const auto out = tpx::apply<scatter_out>(out_partial);
        static_assert(is_same_v<decltype(out), const Tensor<float, B<X>, D<Y>>>);
        static_assert(is_same_v<decltype(out), decltype(in_s)>);  // Out[B_X, D_Y] like In

        // Backward, with loss = sum(Out^2) / 2.
        const auto& dout = out;                                           // 1. dOut[B_X, D_Y]
        const auto dout_full = tpx::apply<adjoint_t<scatter_out>>(dout);  // 2. AllGather_Y
        static_assert(is_same_v<adjoint_t<scatter_out>, AllGather<Y, D<>>>);
        // 3. dW_out[F_Y, D]{U_X} = Tmp[B_X, F_Y] *_B dOut[B_X, D]
        const auto dw_out_partial = tpx::contract<B>(tmp, dout_full);
        static_assert(
            is_same_v<decltype(dw_out_partial), const Tensor<float, F<Y>, D<>, Unreduced<X>>>);
        // 4. dW_out[F_Y, D_X] = ReduceScatter_X,D(dW_out{U_X}): the adjoint of gather_w_out.
        const auto dw_out = tpx::apply<adjoint_t<gather_w_out>>(dw_out_partial);
        static_assert(is_same_v<decltype(dw_out), decltype(w_out_s)>);
        // 5. W_out[F_Y, D] = AllGather_X(W_out[F_Y, D_X]) again (freed after the forward pass).
        const auto w_out_again = tpx::apply<gather_w_out>(w_out_s);
        // 6. dTmp[B_X, F_Y] = dOut[B_X, D] *_D W_out[F_Y, D]^T: local, W_out used transposed.
        const auto dtmp = tpx::contract<D>(dout_full, w_out_again);
        static_assert(is_same_v<decltype(dtmp), const Tensor<float, B<X>, F<Y>>>);
        // 7. dW_in[D, F_Y]{U_X} = In[B_X, D]^T *_B dTmp[B_X, F_Y]
        const auto dw_in_partial = tpx::contract<B>(in_full, dtmp);
        static_assert(
            is_same_v<decltype(dw_in_partial), const Tensor<float, D<>, F<Y>, Unreduced<X>>>);
        // 8. dW_in[D_X, F_Y] = ReduceScatter_X,D: the adjoint of gather_w_in.
        const auto dw_in = tpx::apply<adjoint_t<gather_w_in>>(dw_in_partial);
        static_assert(is_same_v<decltype(dw_in), decltype(w_in_s)>);
        // 9. W_in[D, F_Y] = AllGather_X(W_in[D_X, F_Y]) again.
        const auto w_in_again = tpx::apply<gather_w_in>(w_in_s);
        // 10. dIn[B_X, D]{U_Y} = dTmp[B_X, F_Y] *_F W_in[D, F_Y]^T
        const auto din_partial = tpx::contract<F>(dtmp, w_in_again);
        static_assert(
            is_same_v<decltype(din_partial), const Tensor<float, B<X>, D<>, Unreduced<Y>>>);
        // 11. dIn[B_X, D_Y] = ReduceScatter_Y,D: the adjoint of gather_in.
        const auto din = tpx::apply<adjoint_t<gather_in>>(din_partial);
        static_assert(is_same_v<decltype(din), decltype(in_s)>);

        if (!matches(out, want.out, scale.out) || !matches(dw_out, want.dw_out, scale.dw_out) ||
            !matches(dw_in, want.dw_in, scale.dw_in) || !matches(din, want.din, scale.din))
          ++wrong;
      });
      INFO("mesh " << x << "x" << y << ", B=" << nb << " D=" << nd << " F=" << nf);
      CHECK(wrong == 0);
    }
  }
}

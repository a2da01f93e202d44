// The layers of tpx/nn on sharded tensors against naive loops over the whole tensors in double:
// RMSNorm over a dim split on the tensor-parallel axis (forward and backward), the vocab-parallel
// cross-entropy (loss and gradient of the logits) and the embedding lookup with its gradient, on
// meshes 1x1, 2x2, 2x3 and 3x1 with extents that do not divide (uneven and empty blocks).
// The same layers on [B, T, ...] tensors (rows over two leading dims, as a sequence model has
// them: sequence parallel [B_X, T_Y, D], tensor parallel [B_X, T, D_Y]) equal the two-dim layers
// over the flattened rows [B*T, ...] on one rank, which the other cases check against the loops.
// RMSNorm's and the embedding's backward passes of a gradient that is a partial sum over Y (x
// whole along Y, as plain tensor parallelism's stream is) return partial sums whose totals are
// the loops' gradients, with the grid loops and with whole-row kernels. Tolerances: fp32 math
// against double, relative to the magnitude of the summed terms: 1e-5 for sums of a few dozen
// terms, as stated at each check. Rotary embedding of [B, T, H, E] and [B, H, T, E] with
// positions, heads and batch split over X and Y (uneven blocks) turns every pair by its global
// position's angle, forward and back, as a loop in double does. A pipeline's loss per stage block
// (cross_entropy_per<S> of [S_P, B_X, V_Y], scaled) equals each block's loss in double, computed
// by the loss's stage alone with no collective over P; RMSNorm weights and embedding tables
// stacked over the rows' first dim (a pipeline's stage dim, split over P or whole) give each
// block's rows their own block's norm, lookup and gradients, as the loops in double do.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <tpx/nn/cross_entropy.hpp>
#include <tpx/nn/embedding.hpp>
#include <tpx/nn/rmsnorm.hpp>
#include <tpx/nn/rotary.hpp>
#include <tpx/tpx.hpp>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, D, E, H, T, V, W);

const std::vector<std::pair<int, int>> meshes = {{1, 1}, {2, 2}, {2, 3}, {3, 1}};

// fn(rank) on every rank of each mesh above, the mesh named in a failure's message.
template <class Fn>
void on_each_mesh(const Fn& fn) {
  for (const auto& mesh : meshes) {
    // plain variables, not bindings: clang before 16 cannot capture bindings in lambdas
    const int mx = mesh.first, my = mesh.second;
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, fn);
  }
}

std::vector<float> values(std::int64_t n, std::uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[i] = scale * tpx::kernels::normal_at(seed, static_cast<std::uint64_t>(i));
  return v;
}

// |got - want| <= tol * (scale + 1e-3) elementwise, reported once per failing rank.
void check_close(const std::vector<float>& got, const std::vector<double>& want, double scale,
                 double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * (scale + 1e-3))) ++bad;
  INFO(std::string(what) << ": " << bad << " of " << got.size() << " elements beyond " << tol
                         << " of " << scale);
  CHECK(bad == 0);
}

// Each array of got within tol of the largest magnitude of its twin in want.
void check_arrays_close(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                        double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t a = 0; a < want.size(); ++a) {
    CAPTURE(a);
    double scale = 0;
    for (float v : want[a]) scale = std::max(scale, double(std::abs(v)));
    check_close(got[a], std::vector<double>(want[a].begin(), want[a].end()), scale, tol, what);
  }
}

// RMSNorm of `rows` rows of x [rows, d] with weight w [d], and its backward pass from dy, in
// double, appended to the arrays: y, rstd, dx and dw, row-major.
struct rmsnorm_reference {
  std::vector<double> y, r, dx, dw;
  void add(const float* x, const float* w, const float* dy, std::int64_t rows, std::int64_t d,
           double eps) {
    std::vector<double> dw_here(d, 0.0);
    for (std::int64_t i = 0; i < rows; ++i) {
      double ss = 0, dot = 0;
      for (std::int64_t j = 0; j < d; ++j) ss += double(x[i * d + j]) * x[i * d + j];
      const double ri = 1.0 / std::sqrt(ss / d + eps);
      r.push_back(ri);
      for (std::int64_t j = 0; j < d; ++j) {
        y.push_back(x[i * d + j] * ri * w[j]);
        dot += double(w[j]) * dy[i * d + j] * x[i * d + j];
        dw_here[j] += double(dy[i * d + j]) * x[i * d + j] * ri;
      }
      for (std::int64_t j = 0; j < d; ++j)
        dx.push_back(ri * (w[j] * dy[i * d + j] - x[i * d + j] * ri * ri / d * dot));
    }
    dw.insert(dw.end(), dw_here.begin(), dw_here.end());
  }
};

}  // namespace

TEST_CASE("rmsnorm over D_Y equals the unsharded rmsnorm, forward and backward") {
  const std::int64_t rows = 7, d = 10;
  const float eps = 1e-5f;
  const auto x = values(rows * d, 1), w = values(d, 2), dy = values(rows * d, 3);
  rmsnorm_reference want;
  want.add(x.data(), w.data(), dy.data(), rows, d, eps);
  const std::vector<double>&y = want.y, &r = want.r, &dx = want.dx, &dw = want.dw;
  on_each_mesh([&](auto& rank) {
    const auto xs = tpx::from_global<float, B<X>, D<Y>>(rank, {B(rows), D(d)}, x);
    const auto ws = tpx::from_global<float, D<Y>>(rank, {D(d)}, w);
    const auto dys = tpx::from_global<float, B<X>, D<Y>>(rank, {B(rows), D(d)}, dy);
    const auto fwd = tpx::nn::rmsnorm_forward(xs, ws, eps);
    const auto bwd = tpx::nn::rmsnorm_backward(xs, ws, fwd.rstd, dys);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(bwd.dw)>,
                                 tpx::Tensor<float, D<Y>, tpx::Unreduced<X>>>);
    const auto got_y = tpx::to_global(fwd.y), got_r = tpx::to_global(fwd.rstd);
    const auto got_dx = tpx::to_global(bwd.dx), got_dw = tpx::to_global(bwd.dw);
    check_close(got_y, y, 1.0, 1e-5, "y");
    check_close(got_r, r, 1.0, 1e-5, "rstd");
    check_close(got_dx, dx, 1.0, 1e-5, "dx");
    check_close(got_dw, dw, double(rows), 1e-5, "dw");  // a sum over the rows
  });
}

namespace {
// A host space with the row kernels the GPU's space has (cuda/device_space.hpp): RMSNorm over
// whole rows and the one-pass softmax stats, here the serial row functions of kernels/, counting
// the rows they take.
struct row_kernel_space : tpx::host_space {
  static std::int64_t& rows_taken() {  // by this rank's thread
    thread_local std::int64_t rows = 0;
    return rows;
  }
  template <class T, class Wt>
  static void rmsnorm_rows(const tpx::rank_context&, std::int64_t rows, std::int64_t d, const T* x, const Wt* w,
                           float eps, T* y, float* rstd) {
    rows_taken() += rows;
    for (std::int64_t r = 0; r < rows; ++r)
      rstd[r] = tpx::kernels::rmsnorm_forward_row(d, x + r * d, w, eps, y + r * d);
  }
  template <class T, class Wt>
  static void rmsnorm_rows_backward(const tpx::rank_context&, std::int64_t rows, std::int64_t d, const T* x,
                                    const Wt* w, const float* rstd, const T* dy, T* dx, float* dw) {
    rows_taken() += rows;
    for (std::int64_t r = 0; r < rows; ++r)
      tpx::kernels::rmsnorm_backward_row(d, x + r * d, w, rstd[r], dy + r * d, dx + r * d, dw);
  }
  template <class T>
  static void softmax_stats_rows(const tpx::rank_context&, std::int64_t rows, std::int64_t cols, const T* logits,
                                 float* max, float* sum) {
    rows_taken() += rows;
    for (std::int64_t r = 0; r < rows; ++r) {
      const tpx::kernels::softmax_stats stats = tpx::kernels::softmax_stats_of(cols, logits + r * cols);
      max[r] = stats.max;
      sum[r] = stats.sum;
    }
  }
  template <class T>
  static void cross_entropy_gradient_rows(const tpx::rank_context&, std::int64_t rows, std::int64_t cols,
                                          const T* logits, const float* max, const float* sum,
                                          tpx::kernels::token_at target, std::int64_t first, float dloss,
                                          T* dlogits) {
    rows_taken() += rows;
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto factors = tpx::kernels::cross_entropy_gradient_factors::of({max[r], sum[r]}, dloss);
      for (std::int64_t c = 0; c < cols; ++c)
        dlogits[r * cols + c] = static_cast<T>(factors(static_cast<float>(logits[r * cols + c]), first + c == target(r)));
    }
  }
};

// The same tensor in row_kernel_space.
template <class T, class... Spec>
auto in_row_kernel_space(const tpx::BasicTensor<tpx::host_space, T, Spec...>& t) {
  tpx::BasicTensor<row_kernel_space, T, Spec...> out(t.context(), t.shape(), tpx::for_overwrite);
  std::copy_n(t.data(), t.local().size(), out.data());
  return out;
}

// RMSNorm's y, rstd, dx and dw (reduced) as global arrays, x of type Xt (a host tensor) moved
// into Space.
template <class Space, class Xt, class Wt>
std::vector<std::vector<float>> rmsnorm_outputs(const Xt& x, const Wt& w, const Xt& dy) {
  const auto run = [](const auto& xs, const auto& ws, const auto& dys) {
    const auto fwd = tpx::nn::rmsnorm_forward(xs, ws);
    const auto bwd = tpx::nn::rmsnorm_backward(xs, ws, fwd.rstd, dys);
    return std::vector<std::vector<float>>{tpx::to_global(fwd.y), tpx::to_global(fwd.rstd), tpx::to_global(bwd.dx),
                                           tpx::to_global(bwd.dw)};
  };
  if constexpr (std::is_same_v<Space, row_kernel_space>)
    return run(in_row_kernel_space(x), in_row_kernel_space(w), in_row_kernel_space(dy));
  else
    return run(x, w, dy);
}
// What comparing row_kernel_space with host_space collects on a mesh, for two layouts of the
// input: rank 0's arrays from each space, and the rows the kernels took on all ranks.
struct kernel_comparison {
  std::vector<std::vector<float>> kernels[2], plain[2];
  std::int64_t rows_taken[2] = {};
  std::mutex lock;

  void add(int world_rank, int layout, std::int64_t rows, std::vector<std::vector<float>> with_kernels,
           std::vector<std::vector<float>> with_loops) {
    const std::lock_guard<std::mutex> guard(lock);
    rows_taken[layout] += rows;
    if (world_rank != 0) return;
    kernels[layout] = std::move(with_kernels);
    plain[layout] = std::move(with_loops);
  }
  // Same math, summed in another order: 1e-5 of the largest value.
  void check(const char* what) {
    for (int layout = 0; layout < 2; ++layout) {
      CAPTURE(layout);
      check_arrays_close(kernels[layout], plain[layout], 1e-5, what);
    }
  }
};
}  // namespace

// The layer takes a space's whole-row kernels exactly when every rank holds whole rows, whatever
// the tensor's type says, and their results equal the grid loops': x[B_X, T_Y, D] (D whole) on
// every mesh, and x[B_X, D_Y] on meshes whose Y has one rank.
TEST_CASE("rmsnorm takes a space's whole-row kernels when every rank holds whole rows") {
  const std::int64_t b = 3, t = 5, d = 12;
  const auto x = values(b * t * d, 31), w = values(d, 32), dy = values(b * t * d, 33);
  for (const auto& values : meshes) {
    const int mx = std::get<0>(values), my = std::get<1>(values);
    CAPTURE(mx);
    CAPTURE(my);
    kernel_comparison compared;
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      const auto xs = tpx::from_global<float, B<X>, T<Y>, D<>>(rank, {B(b), T(t), D(d)}, x);
      const auto dys = tpx::from_global<float, B<X>, T<Y>, D<>>(rank, {B(b), T(t), D(d)}, dy);
      const auto ws = tpx::from_global<float, D<>>(rank, {D(d)}, w);
      const auto xm = tpx::from_global<float, B<X>, D<Y>>(rank, {B(b * t), D(d)}, x);
      const auto dym = tpx::from_global<float, B<X>, D<Y>>(rank, {B(b * t), D(d)}, dy);
      const auto wm = tpx::from_global<float, D<Y>>(rank, {D(d)}, w);
      const std::int64_t before = row_kernel_space::rows_taken();
      auto sequence = rmsnorm_outputs<row_kernel_space>(xs, ws, dys);
      const std::int64_t between = row_kernel_space::rows_taken();
      auto tensor_parallel = rmsnorm_outputs<row_kernel_space>(xm, wm, dym);
      const std::int64_t after = row_kernel_space::rows_taken();
      compared.add(rank.world_rank(), 0, between - before, std::move(sequence),
                   rmsnorm_outputs<tpx::host_space>(xs, ws, dys));
      compared.add(rank.world_rank(), 1, after - between, std::move(tensor_parallel),
                   rmsnorm_outputs<tpx::host_space>(xm, wm, dym));
    });
    // Forward and backward take each row once per rank that holds it: the ranks along Y hold
    // the same rows of [B_X, D_Y] (D whole when Y has one rank) and distinct ones of
    // [B_X, T_Y, D].
    CHECK(compared.rows_taken[0] == 2 * b * t);
    CHECK(compared.rows_taken[1] == (my == 1 ? 2 * b * t : 0));
    compared.check("whole-row kernels against grid loops");
  }
}

// The loss takes a space's one-pass softmax stats and row gradient, split vocabulary or not, and
// equals the loss by the two folds and the grid loop: the stats of each rank's block of the
// vocabulary, rescaled to the row's max after its AllReduce(max), add up to the row's, and the
// gradient of each block finds its target by the block's first column.
TEST_CASE("vocab-parallel cross-entropy takes a space's one-pass softmax stats and row gradient") {
  const std::int64_t rows = 9, vocab = 13, width = 2;
  const auto logits = values(rows * vocab, 41, 3.0f);
  std::vector<std::int32_t> tokens(rows * width);
  for (std::int64_t i = 0; i < rows * width; ++i) tokens[i] = static_cast<std::int32_t>((i * 5 + 1) % vocab);
  const auto outputs = [](const auto& ls, const auto& ts) {
    const auto ce = tpx::nn::cross_entropy(ls, ts, 1);
    return std::vector<std::vector<float>>{{tpx::scalar_on_host(ce.loss)}, tpx::to_global(ce.dlogits)};
  };
  for (const auto& values : meshes) {
    const int mx = std::get<0>(values), my = std::get<1>(values);
    CAPTURE(mx);
    CAPTURE(my);
    kernel_comparison compared;
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      const auto ts = tpx::from_global<std::int32_t, B<X>, W<>>(rank, {B(rows), W(width)}, tokens);
      const auto split = tpx::from_global<float, B<X>, V<Y>>(rank, {B(rows), V(vocab)}, logits);
      const auto whole = tpx::from_global<float, B<X>, V<>>(rank, {B(rows), V(vocab)}, logits);
      const std::int64_t before = row_kernel_space::rows_taken();
      auto split_kernels = outputs(in_row_kernel_space(split), in_row_kernel_space(ts));
      const std::int64_t between = row_kernel_space::rows_taken();
      auto whole_kernels = outputs(in_row_kernel_space(whole), in_row_kernel_space(ts));
      const std::int64_t after = row_kernel_space::rows_taken();
      compared.add(rank.world_rank(), 0, between - before, std::move(split_kernels), outputs(split, ts));
      compared.add(rank.world_rank(), 1, after - between, std::move(whole_kernels), outputs(whole, ts));
    });
    // Each rank takes the stats and the gradient of each of its rows once: with V split, every
    // rank along Y holds a block of the same rows.
    CHECK(compared.rows_taken[0] == 2 * rows * my);
    CHECK(compared.rows_taken[1] == 2 * rows * my);
    compared.check("row kernels against folds and grid loops");
  }
}

TEST_CASE("vocab-parallel cross-entropy over V_Y equals the unsharded loss and gradient") {
  const std::int64_t rows = 9, vocab = 13, width = 3, column = 2;
  const auto logits = values(rows * vocab, 4, 3.0f);
  std::vector<std::int32_t> tokens(rows * width);
  for (std::int64_t i = 0; i < rows * width; ++i)
    tokens[i] = static_cast<std::int32_t>((i * 7 + 3) % vocab);
  double loss = 0;
  std::vector<double> dlogits(rows * vocab);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = tokens[r * width + column];
    double m = -INFINITY, s = 0;
    for (std::int64_t v = 0; v < vocab; ++v) m = std::max(m, double(logits[r * vocab + v]));
    for (std::int64_t v = 0; v < vocab; ++v) s += std::exp(logits[r * vocab + v] - m);
    loss += (m + std::log(s) - logits[r * vocab + t]) / rows;
    for (std::int64_t v = 0; v < vocab; ++v)
      dlogits[r * vocab + v] = (std::exp(logits[r * vocab + v] - m) / s - (v == t)) / rows;
  }
  on_each_mesh([&](auto& rank) {
    const auto ls = tpx::from_global<float, B<X>, V<Y>>(rank, {B(rows), V(vocab)}, logits);
    const auto ts = tpx::from_global<std::int32_t, B<X>, W<>>(rank, {B(rows), W(width)}, tokens);
    const auto ce = tpx::nn::cross_entropy(ls, ts, column);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(ce.dlogits)>,
                                 tpx::Tensor<float, B<X>, V<Y>>>);
    check_close({tpx::scalar_on_host(ce.loss)}, {loss}, loss, 1e-5, "loss");
    check_close(tpx::to_global(ce.dlogits), dlogits, 1.0 / rows, 1e-5, "dlogits");
  });
}

namespace {
TPX_MESH_AXES(P);  // pipeline stages
TPX_DIMS(S);       // the stage dim, S_P
}  // namespace

// A pipeline's loss stage alone takes its microbatch's loss of logits [S_P, B_X, V_Y]: a loss per
// stage block, the block's mean times `scale`, which needs collectives over X and Y only, none
// over P (the other stages are elsewhere at that tick, and here never call it).
TEST_CASE("cross_entropy_per<S> keeps a loss per stage block, with no collective over the stages") {
  const std::int64_t rows = 7, vocab = 11, width = 2, column = 1;
  const float scale = 0.25f;
  for (const auto& mesh : {std::tuple{1, 1, 1}, {2, 2, 2}, {3, 1, 2}, {2, 3, 1}}) {
    // plain variables, not bindings: clang before 16 cannot capture bindings in lambdas
    const int mp = std::get<0>(mesh), mx = std::get<1>(mesh), my = std::get<2>(mesh);
    CAPTURE(mp);
    CAPTURE(mx);
    CAPTURE(my);
    // Every stage's block has logits and targets of its own.
    const auto logits = values(mp * rows * vocab, 44, 3.0f);
    std::vector<std::int32_t> tokens(mp * rows * width);
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<std::int32_t>((i * 7 + 2) % vocab);
    std::vector<double> loss(mp), dlogits(mp * rows * vocab);
    for (std::int64_t r = 0; r < mp * rows; ++r) {
      const float* x = &logits[r * vocab];
      const std::int64_t t = tokens[r * width + column];
      double m = -INFINITY, s = 0;
      for (std::int64_t v = 0; v < vocab; ++v) m = std::max(m, double(x[v]));
      for (std::int64_t v = 0; v < vocab; ++v) s += std::exp(x[v] - m);
      loss[r / rows] += scale * (m + std::log(s) - x[t]) / rows;
      for (std::int64_t v = 0; v < vocab; ++v)
        dlogits[r * vocab + v] = scale * (std::exp(x[v] - m) / s - (v == t)) / rows;
    }
    for (int loss_stage = 0; loss_stage < mp; ++loss_stage)
      tpx::spmd(tpx::host, tpx::Mesh<P, X, Y>{mp, mx, my}, [&](auto& rank) {
        if (rank.template axis<P>().coord != loss_stage) return;
        const auto ls =
            tpx::from_global<float, S<P>, B<X>, V<Y>>(rank, {S(mp), B(rows), V(vocab)}, logits);
        const auto ts = tpx::from_global<std::int32_t, S<P>, B<X>, W<>>(
            rank, {S(mp), B(rows), W(width)}, tokens);
        const auto ce = tpx::nn::cross_entropy_per<S>(ls, ts, column, scale);
        static_assert(
            std::is_same_v<std::remove_cvref_t<decltype(ce.loss)>, tpx::Tensor<float, S<P>>>);
        static_assert(std::is_same_v<std::remove_cvref_t<decltype(ce.dlogits)>,
                                     tpx::Tensor<float, S<P>, B<X>, V<Y>>>);
        for (const tpx::collective_traffic& over :
             {rank.traffic_by_axes()[1], rank.traffic_by_axes()[3], rank.traffic_by_axes()[5],
              rank.traffic_by_axes()[7]})
          CHECK(over.total().calls == 0);
        const auto stage_loss = ce.loss.local();
        check_close({stage_loss.begin(), stage_loss.end()}, {loss[loss_stage]}, loss[loss_stage],
                    1e-5, "loss");
        // This rank's block of the gradient: its rows of the stage's block, its vocabulary columns.
        std::vector<double> mine;
        for (std::int64_t r = 0; r < ce.dlogits.local_extent(1); ++r)
          for (std::int64_t v = 0; v < ce.dlogits.local_extent(2); ++v)
            mine.push_back(dlogits[((loss_stage * rows) + ce.dlogits.local_offset(1) + r) * vocab +
                                   ce.dlogits.local_offset(2) + v]);
        const auto block = ce.dlogits.local();
        check_close(std::vector<float>(block.begin(), block.end()), mine, scale / rows, 1e-5,
                    "dlogits");
      });
  }
}

// A pipeline stacks its stages' norms and embedding tables: a weight per block of x's first dim S,
// each block's rows normalized with (or looking up) their own block's, whether S is split over
// P (each stage one block, or two and one for 3 blocks over 2 stages) or whole (every rank all
// blocks), through the grid loops and the whole-row kernels alike.
TEST_CASE(
    "rmsnorm and the embedding with a weight per block of x's first dim use each block's own") {
  const std::int64_t blocks = 3, rows = 5, d = 6, vocab = 7, width = 2, column = 1;
  const float eps = 1e-5f;
  const auto x = values(blocks * rows * d, 51), w = values(blocks * d, 52),
             dy = values(blocks * rows * d, 53);
  const auto table = values(blocks * vocab * d, 54);
  std::vector<std::int32_t> tokens(blocks * rows * width);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<std::int32_t>((i * 3 + 1) % vocab);
  rmsnorm_reference norm;
  std::vector<double> looked_up(blocks * rows * d), table_gradient(blocks * vocab * d, 0.0);
  for (std::int64_t b = 0; b < blocks; ++b) {
    norm.add(&x[b * rows * d], &w[b * d], &dy[b * rows * d], rows, d, eps);
    for (std::int64_t r = b * rows; r < (b + 1) * rows; ++r)
      for (std::int64_t j = 0; j < d; ++j) {
        const std::int64_t row_of_table = b * vocab + tokens[r * width + column];
        looked_up[r * d + j] = table[row_of_table * d + j];
        table_gradient[row_of_table * d + j] += dy[r * d + j];
      }
  }
  const auto check_layers = [&](auto& rank, auto split) {
    using Split = decltype(split);  // S<P> or S<>
    const auto xs = tpx::from_global<float, Split, B<X>, D<Y>>(rank, {S(blocks), B(rows), D(d)}, x);
    const auto dys =
        tpx::from_global<float, Split, B<X>, D<Y>>(rank, {S(blocks), B(rows), D(d)}, dy);
    const auto ws = tpx::from_global<float, Split, D<Y>>(rank, {S(blocks), D(d)}, w);
    for (const auto& got : {rmsnorm_outputs<tpx::host_space>(xs, ws, dys),
                            rmsnorm_outputs<row_kernel_space>(xs, ws, dys)}) {
      check_close(got[0], norm.y, 1.0, 1e-5, "y");
      check_close(got[1], norm.r, 1.0, 1e-5, "rstd");
      check_close(got[2], norm.dx, 1.0, 1e-5, "dx");
      check_close(got[3], norm.dw, double(rows), 1e-5, "dw");  // a sum over a block's rows
    }
    const auto es =
        tpx::from_global<float, Split, V<>, D<Y>>(rank, {S(blocks), V(vocab), D(d)}, table);
    const auto ts = tpx::from_global<std::int32_t, Split, B<X>, W<>>(
        rank, {S(blocks), B(rows), W(width)}, tokens);
    auto sum = tpx::zeros<float, Split, B<X>, D<Y>>(rank, {S(blocks), B(rows), D(d)});
    tpx::nn::embedding_add(sum, es, ts, column);
    check_close(tpx::to_global(sum), looked_up, 1.0, 1e-6, "lookup");
    auto grad = tpx::nn::embedding_gradient<S, V>(dys, ts, column, vocab);
    static_assert(
        std::is_same_v<decltype(grad), tpx::Tensor<float, Split, V<>, D<Y>, tpx::Unreduced<X>>>);
    check_close(tpx::to_global(tpx::all_reduce<X>(std::move(grad))), table_gradient, double(rows),
                1e-5, "table gradient");
  };
  for (const auto& mesh : {std::tuple{1, 1, 1}, {3, 1, 2}, {2, 2, 1}, {3, 2, 3}}) {
    const int mp = std::get<0>(mesh), mx = std::get<1>(mesh), my = std::get<2>(mesh);
    CAPTURE(mp);
    CAPTURE(mx);
    CAPTURE(my);
    tpx::spmd(tpx::host, tpx::Mesh<P, X, Y>{mp, mx, my}, [&](auto& rank) {
      check_layers(rank, S<P>{});
      check_layers(rank, S<>{});
    });
  }
}

// Handed over as an rvalue, the logits' buffer becomes the gradient's: no second [Rows, V] buffer,
// and the same bits as the gradient of logits left untouched.
TEST_CASE("cross-entropy of moved logits writes the gradient in their place, with the same bits") {
  const std::int64_t rows = 7, vocab = 12, width = 2;
  const auto logits = values(rows * vocab, 43, 3.0f);
  std::vector<std::int32_t> tokens(rows * width);
  for (std::int64_t i = 0; i < rows * width; ++i) tokens[i] = static_cast<std::int32_t>((i * 5 + 2) % vocab);
  on_each_mesh([&](auto& rank) {
    const auto ts = tpx::from_global<std::int32_t, B<X>, W<>>(rank, {B(rows), W(width)}, tokens);
    const auto kept = tpx::from_global<float, B<X>, V<Y>>(rank, {B(rows), V(vocab)}, logits);
    auto handed = tpx::from_global<float, B<X>, V<Y>>(rank, {B(rows), V(vocab)}, logits);
    const float* buffer = handed.data();
    const auto reference = tpx::nn::cross_entropy(kept, ts, 1);
    const auto in_place = tpx::nn::cross_entropy(std::move(handed), ts, 1);
    CHECK(in_place.dlogits.data() == buffer);
    CHECK(reference.dlogits.data() != kept.data());
    CHECK(tpx::to_global(kept) == logits);  // an lvalue's logits are left as they were
    CHECK(tpx::scalar_on_host(in_place.loss) == tpx::scalar_on_host(reference.loss));
    CHECK(tpx::to_global(in_place.dlogits) == tpx::to_global(reference.dlogits));
  });
}

TEST_CASE("cross-entropy of a target outside the vocabulary is NaN, not a read out of bounds") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 2}, [&](auto& rank) {
    const auto ls = tpx::from_global<float, B<X>, V<Y>>(rank, {B(2), V(4)}, values(8, 5));
    const std::vector<std::int32_t> tokens = {1, 4};
    const auto ts = tpx::from_global<std::int32_t, B<X>, W<>>(rank, {B(2), W(1)}, tokens);
    CHECK(std::isnan(tpx::scalar_on_host(tpx::nn::cross_entropy(ls, ts, 0).loss)));
  });
}

TEST_CASE("embedding lookup and its gradient over D_Y equal the unsharded table") {
  const std::int64_t rows = 11, d = 7, vocab = 5, width = 2;
  const auto table = values(vocab * d, 6), dx = values(rows * d, 7);
  std::vector<std::int32_t> tokens(rows * width);
  for (std::int64_t i = 0; i < rows * width; ++i)
    tokens[i] = static_cast<std::int32_t>((i * 3 + 1) % vocab);
  std::vector<double> x(rows * d, 0.0), dtable(vocab * d, 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t k = 0; k < width; ++k)
      for (std::int64_t j = 0; j < d; ++j) x[r * d + j] += table[tokens[r * width + k] * d + j];
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < d; ++j) dtable[tokens[r * width + 1] * d + j] += dx[r * d + j];
  on_each_mesh([&](auto& rank) {
    const auto ts = tpx::from_global<std::int32_t, B<X>, W<>>(rank, {B(rows), W(width)}, tokens);
    const auto tab = tpx::from_global<float, V<>, D<Y>>(rank, {V(vocab), D(d)}, table);
    auto xs = tpx::zeros<float, B<X>, D<Y>>(rank, {B(rows), D(d)});
    for (std::int64_t k = 0; k < width; ++k) tpx::nn::embedding_add(xs, tab, ts, k);
    check_close(tpx::to_global(xs), x, 1.0, 1e-6, "x");
    const auto dxs = tpx::from_global<float, B<X>, D<Y>>(rank, {B(rows), D(d)}, dx);
    const auto grad = tpx::nn::embedding_gradient<V>(dxs, ts, 1, vocab);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad)>,
                                 tpx::Tensor<float, V<>, D<Y>, tpx::Unreduced<X>>>);
    check_close(tpx::to_global(grad), dtable, double(rows), 1e-6, "dtable");
  });
}

namespace {
// This rank's share of dy as a partial sum over Y, [Rows, Cols]{U_Y} (x's layout): the
// rank at Y coordinate y < Y - 1 holds dy times random factors, the last rank the rest, so that the
// shares add up to dy (to rounding) and no one rank's share is a multiple of dy.
template <class Rows, class Cols, class Rank>
auto partial_over_y(Rank& rank, std::int64_t rows, std::int64_t d, const std::vector<float>& dy) {
  const int ny = rank.template size<Y>(), y = rank.template coord<Y>();
  std::vector<float> share(dy.size());
  for (std::size_t i = 0; i < dy.size(); ++i) {
    const auto factor = [&](int k) {
      return tpx::kernels::normal_at(100 + static_cast<std::uint64_t>(k), i);
    };
    float others = 0;
    for (int k = 0; k + 1 < ny; ++k) others += factor(k) * dy[i];
    share[i] = y + 1 < ny ? factor(y) * dy[i] : dy[i] - others;
  }
  const auto local = tpx::from_global<float, Rows, Cols>(rank, {B(rows), D(d)}, share);
  tpx::Tensor<float, Rows, Cols, tpx::Unreduced<Y>> out(rank, {B(rows), D(d)});
  std::copy_n(local.data(), local.local().size(), out.data());
  return out;
}
}  // namespace

// Plain tensor parallelism keeps x whole and the same on every Y rank, and its gradient a partial
// sum over Y (each rank's heads' share): both layers' backward passes are linear in it, so they
// take it as it is and return partial sums, whose totals are the backward of the total. x is
// [B_X, D] (whole rows: the whole-row kernels run) and [B, D_X] (the row sums are all-reduced
// over X while partial over Y).
TEST_CASE("rmsnorm and embedding backward of a gradient partial over Y are partial over Y") {
  const std::int64_t rows = 9, d = 6, vocab = 5;
  const float eps = 1e-5f;
  const auto x = values(rows * d, 21), w = values(d, 22), dy = values(rows * d, 23);
  std::vector<std::int32_t> tokens(rows);
  for (std::int64_t i = 0; i < rows; ++i)
    tokens[i] = static_cast<std::int32_t>((i * 2 + 1) % vocab);
  std::vector<double> dx(rows * d), dw(d, 0.0), dtable(vocab * d, 0.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    double ss = 0, dot = 0;
    for (std::int64_t j = 0; j < d; ++j) ss += double(x[i * d + j]) * x[i * d + j];
    const double r = 1.0 / std::sqrt(ss / d + eps);
    for (std::int64_t j = 0; j < d; ++j) {
      dot += double(w[j]) * dy[i * d + j] * x[i * d + j];
      dw[j] += double(dy[i * d + j]) * x[i * d + j] * r;
      dtable[tokens[i] * d + j] += dy[i * d + j];
    }
    for (std::int64_t j = 0; j < d; ++j)
      dx[i * d + j] = r * (w[j] * dy[i * d + j] - x[i * d + j] * r * r / d * dot);
  }
  // One layout of x, [Rows, Cols]: the row dim's and the column dim's splits.
  const auto check_layout = [&]<class Rows, class Cols>(auto& rank, Rows*, Cols*) {
    using RowAxes = typename Rows::axes;  // what dw is partial over besides Y
    const auto xs = tpx::from_global<float, Rows, Cols>(rank, {B(rows), D(d)}, x);
    const auto ws = tpx::from_global<float, Cols>(rank, {D(d)}, w);
    const auto share = partial_over_y<Rows, Cols>(rank, rows, d, dy);
    const bool whole_rows = Cols::axes::size == 0 || rank.template size<X>() == 1;
    const auto check = [&](const auto& xk, const auto& wk, const auto& dyk, bool kernels) {
      CAPTURE(kernels);
      const std::int64_t taken = row_kernel_space::rows_taken();
      const auto bwd =
          tpx::nn::rmsnorm_backward(xk, wk, tpx::nn::rmsnorm_forward(xk, wk, eps).rstd, dyk);
      CHECK((row_kernel_space::rows_taken() > taken) == (kernels && whole_rows));
      using Space = typename std::remove_cvref_t<decltype(xk)>::space;
      using Xk = tpx::BasicTensor<Space, float, Rows, Cols>;
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(bwd.dx)>,
                                   tpx::tensor_with_t<Xk, typename Xk::dims, tpx::Unreduced<Y>>>);
      static_assert(
          std::is_same_v<std::remove_cvref_t<decltype(bwd.dw)>,
                         tpx::tensor_with_t<tpx::BasicTensor<Space, float>, tpx::type_list<Cols>,
                                            tpx::unreduced_union_t<tpx::as_unreduced_t<RowAxes>,
                                                                   tpx::Unreduced<Y>>>>);
      check_close(tpx::to_global(tpx::reshard<Xk>(bwd.dx)), dx, 1.0, 1e-5, "dx");
      check_close(tpx::to_global(tpx::reshard<tpx::BasicTensor<Space, float, Cols>>(bwd.dw)), dw,
                  double(rows), 1e-5, "dw");
    };
    check(xs, ws, share, false);
    check(in_row_kernel_space(xs), in_row_kernel_space(ws), in_row_kernel_space(share), true);
    const auto ts = tpx::from_global<std::int32_t, Rows, W<>>(rank, {B(rows), W(1)}, tokens);
    const auto grad = tpx::nn::embedding_gradient<V>(share, ts, 0, vocab);
    check_close(tpx::to_global(tpx::reshard<tpx::Tensor<float, V<>, Cols>>(grad)), dtable,
                double(rows), 1e-6, "dtable");
  };
  on_each_mesh([&](auto& rank) {
    check_layout(rank, static_cast<B<X>*>(nullptr), static_cast<D<>*>(nullptr));
    check_layout(rank, static_cast<B<>*>(nullptr), static_cast<D<X>*>(nullptr));
  });
}

namespace {

// Every output of RMSNorm, cross-entropy and the embedding on rows [B, T], flattened, from
// layouts X (activations, tokens) and L (logits) on a mesh, or from the two-dim layers when
// flat is true.
struct sequence_outputs {
  std::vector<std::vector<float>> arrays;
};

template <class XDims, class LDims>
struct sequence_case;
template <class... XSpec, class... LSpec>
struct sequence_case<tpx::type_list<XSpec...>, tpx::type_list<LSpec...>> {
  static constexpr std::int64_t nb = 3, nt = 5, d = 6, vocab = 7, width = 2;

  template <class Rank>
  static std::vector<std::vector<float>> run(Rank& rank, bool flat) {
    const auto x = values(nb * nt * d, 11), w = values(d, 12), dy = values(nb * nt * d, 13);
    const auto logits = values(nb * nt * vocab, 14, 3.0f), table = values(vocab * d, 15);
    std::vector<std::int32_t> tokens(nb * nt * width);
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<std::int32_t>((i * 5 + 2) % vocab);
    const auto ws = tpx::from_global<float, D<>>(rank, {D(d)}, w);
    const auto tab = tpx::from_global<float, V<>, D<>>(rank, {V(vocab), D(d)}, table);
    auto layers = [&](const auto& xs, const auto& dys, const auto& ls, const auto& ts,
                      const auto& lts, auto emb) {
      auto wl =
          tpx::reshard<tpx::Tensor<float, tpx::nn::last_dim_t<std::remove_cvref_t<decltype(xs)>>>>(
              ws);
      const auto fwd = tpx::nn::rmsnorm_forward(xs, wl);
      const auto bwd = tpx::nn::rmsnorm_backward(xs, wl, fwd.rstd, dys);
      const auto ce = tpx::nn::cross_entropy(ls, lts, 1);
      tpx::nn::embedding_add(
          emb, tpx::reshard<tpx::Tensor<float, V<>, tpx::nn::last_dim_t<decltype(emb)>>>(tab), ts,
          0);
      const auto demb = tpx::nn::embedding_gradient<V>(dys, ts, 1, vocab);
      return std::vector<std::vector<float>>{tpx::to_global(fwd.y),
                                             tpx::to_global(fwd.rstd),
                                             tpx::to_global(bwd.dx),
                                             tpx::to_global(bwd.dw),
                                             {tpx::scalar_on_host(ce.loss)},
                                             tpx::to_global(ce.dlogits),
                                             tpx::to_global(emb),
                                             tpx::to_global(demb)};
    };
    if (flat) {
      const auto xs = tpx::from_global<float, B<>, D<>>(rank, {B(nb * nt), D(d)}, x);
      const auto dys = tpx::from_global<float, B<>, D<>>(rank, {B(nb * nt), D(d)}, dy);
      const auto ls = tpx::from_global<float, B<>, V<>>(rank, {B(nb * nt), V(vocab)}, logits);
      const auto ts =
          tpx::from_global<std::int32_t, B<>, W<>>(rank, {B(nb * nt), W(width)}, tokens);
      return layers(xs, dys, ls, ts, ts, tpx::zeros<float, B<>, D<>>(rank, {B(nb * nt), D(d)}));
    }
    const auto xs = tpx::from_global<float, XSpec...>(rank, {B(nb), T(nt), D(d)}, x);
    const auto dys = tpx::from_global<float, XSpec...>(rank, {B(nb), T(nt), D(d)}, dy);
    const auto ls = tpx::from_global<float, LSpec...>(rank, {B(nb), T(nt), V(vocab)}, logits);
    using XTokens = tpx::type_list<XSpec...>;
    using LTokens = tpx::type_list<LSpec...>;
    const auto ts = tokens_like<XTokens>(rank, tokens);
    const auto lts = tokens_like<LTokens>(rank, tokens);
    return layers(xs, dys, ls, ts, lts, tpx::zeros<float, XSpec...>(rank, {B(nb), T(nt), D(d)}));
  }

  // int32 tokens [B.., T.., W] with the rows split as in Dims.
  template <class Dims, class Rank>
  static auto tokens_like(Rank& rank, const std::vector<std::int32_t>& tokens) {
    return [&]<class Bs, class Ts, class Last>(tpx::type_list<Bs, Ts, Last>) {
      return tpx::from_global<std::int32_t, Bs, Ts, W<>>(rank, {B(nb), T(nt), W(width)}, tokens);
    }(Dims{});
  }
};

template <class XDims, class LDims>
void check_sequence_layout() {
  using C = sequence_case<XDims, LDims>;
  std::vector<std::vector<float>> want;
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) { want = C::run(rank, true); });
  const char* names[] = {"rmsnorm y",  "rmsnorm rstd",       "rmsnorm dx",
                         "rmsnorm dw", "cross-entropy loss", "cross-entropy dlogits",
                         "embedding",  "embedding gradient"};
  on_each_mesh([&](auto& rank) {
    const auto got = C::run(rank, false);
    REQUIRE(got.size() == want.size());
    for (std::size_t a = 0; a < got.size(); ++a) {
      std::vector<double> reference(want[a].begin(), want[a].end());
      double scale = 0;
      for (double v : reference) scale = std::max(scale, std::abs(v));
      check_close(got[a], reference, scale, 1e-5, names[a]);
    }
  });
}

}  // namespace

TEST_CASE("row layers on sequence-parallel [B_X, T_Y, D] rows equal the flat layers") {
  check_sequence_layout<tpx::type_list<B<X>, T<Y>, D<>>, tpx::type_list<B<X>, T<>, V<Y>>>();
}

TEST_CASE("row layers on tensor-parallel [B_X, T, D_Y] rows equal the flat layers") {
  check_sequence_layout<tpx::type_list<B<X>, T<>, D<Y>>, tpx::type_list<B<X>, T<Y>, V<>>>();
}

namespace {
// x [batch, positions, heads, e] turned by RoPE in double, pair i of the row at position t by
// direction * t * base^(-2i/e); returned in the layout [B, T, H, E] or, heads first, [B, H, T, E].
std::vector<double> rotated(const std::vector<float>& x, std::int64_t batch, std::int64_t positions,
                            std::int64_t heads, std::int64_t e, double base, double direction,
                            bool heads_first) {
  std::vector<double> out(x.size());
  const std::int64_t half = e / 2;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < positions; ++t)
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t from = ((b * positions + t) * heads + h) * e;
        const std::int64_t to = heads_first ? ((b * heads + h) * positions + t) * e : from;
        for (std::int64_t i = 0; i < half; ++i) {
          const double angle = direction * t * std::pow(base, -static_cast<double>(i) / half);
          const double a = x[from + i], c = x[from + i + half];
          out[to + i] = a * std::cos(angle) - c * std::sin(angle);
          out[to + i + half] = c * std::cos(angle) + a * std::sin(angle);
        }
      }
  return out;
}

std::vector<float> heads_first(const std::vector<float>& x, std::int64_t batch,
                               std::int64_t positions, std::int64_t heads, std::int64_t e) {
  std::vector<float> out(x.size());
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < positions; ++t)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t i = 0; i < e; ++i)
          out[((b * heads + h) * positions + t) * e + i] =
              x[((b * positions + t) * heads + h) * e + i];
  return out;
}
}  // namespace

TEST_CASE("rotary embedding with positions, heads and batch split equals the rotation in double") {
  const std::int64_t batch = 3, positions = 7, heads = 5, e = 6;
  const double base = 500.0;
  const auto x = values(batch * positions * heads * e, 21);
  const auto x_heads_first = heads_first(x, batch, positions, heads, e);
  // Angles up to 6 rad and |x| < 5: each element is within 8u (1 + 6) (|a| + |b|) < 1e-5 of the
  // double rotation (kernels_functors_test derives the bound).
  const double tol = 1e-5;
  on_each_mesh([&](auto& rank) {
    // Positions split over Y, as context parallelism's blocks are: each rank's rows start at its
    // block's global position.
    const auto xs = tpx::from_global<float, B<X>, T<Y>, H<>, E<>>(
        rank, {B(batch), T(positions), H(heads), E(e)}, x);
    check_close(tpx::to_global(tpx::nn::rotary_forward<T>(xs, float(base))),
                rotated(x, batch, positions, heads, e, base, 1, false), 1.0, tol,
                "[B_X, T_Y, H, E]");
    check_close(tpx::to_global(tpx::nn::rotary_backward<T>(xs, float(base))),
                rotated(x, batch, positions, heads, e, base, -1, false), 1.0, tol,
                "backward [B_X, T_Y, H, E]");
    // Heads split over Y (tensor parallelism), positions over X, heads first.
    const auto hs = tpx::from_global<float, B<>, H<Y>, T<X>, E<>>(
        rank, {B(batch), H(heads), T(positions), E(e)}, x_heads_first);
    check_close(tpx::to_global(tpx::nn::rotary_forward<T>(hs, float(base))),
                rotated(x, batch, positions, heads, e, base, 1, true), 1.0, tol,
                "[B, H_Y, T_X, E]");
    // The default base is Llama's 10000; a head of odd width has no pairs to turn.
    const auto ys = tpx::from_global<float, B<X>, T<Y>, H<>, E<>>(
        rank, {B(batch), T(positions), H(heads), E(e)}, x);
    check_close(tpx::to_global(tpx::nn::rotary_forward<T>(ys)),
                rotated(x, batch, positions, heads, e, 10000.0, 1, false), 1.0, tol, "base 10000");
    const auto odd = tpx::zeros<float, B<X>, T<Y>, H<>, E<>>(rank, {B(2), T(3), H(1), E(5)});
    CHECK_THROWS_WITH(tpx::nn::rotary_forward<T>(odd),
                      doctest::Contains("head dim of [B_X, T_Y, H, E] has odd width 5"));
    CHECK_THROWS_WITH(tpx::nn::rotary_forward<T>(ys, 1.0f), doctest::Contains("base 1.0"));
  });
}

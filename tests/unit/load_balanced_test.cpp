// Context parallelism's load-balanced order (tpx/nn/sequence_order.hpp) and the layers that take
// it, against independent references. The order: every rank's two chunks are the ones Megatron's
// rule names (chunks c and 2C-1-c), counted from a list of chunks built here, and moving a whole
// sequence into the order of positions and back restores it. The layers: a sequence of T
// positions is loaded in the balanced order (index i holds position load_balanced_position(i)),
// split over X (and heads over Y), keys all-gathered; the fused attention with load_balanced<X>
// and rotary embedding with load_balanced<X> must give, at each index, the unsharded layers'
// result at that index's position: the reference attention (nn/attention.hpp) over whole
// sequences in the order of positions, and rotary_forward of the whole sequence. Meshes 1x1 (one
// rank, still two chunks), 2x1, 3x2 and 4x1, T = 24 and 72 (chunks that start inside the fused
// kernels' tiles of 32 and cross them). Tolerances: fp32 attention, 2e-5 + 1e-5 |want| (the same
// sums in another order); rotary, bit-exact (the same angles for the same positions). Wrong
// extents and blocks fail with the layer's name, the extent and the rank.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <tpx/nn/attention.hpp>
#include <tpx/nn/fused_attention.hpp>
#include <tpx/nn/rotary.hpp>
#include <tpx/nn/sequence_order.hpp>
#include <tpx/tpx.hpp>
#include <type_traits>
#include <vector>

namespace {

TPX_MESH_AXES(X, Y);
TPX_DIMS(B, T, S, H, E);

using tpx::nn::load_balanced;
using tpx::nn::load_balanced_position;

const std::int64_t nb = 2, nh = 4, ne = 8;

// x [B, T, H, E] with its T entries put in the balanced order over `ranks` (entry i of the
// result is entry load_balanced_position(i) of x), or back (inverse).
std::vector<float> reordered(const std::vector<float>& x, std::int64_t t, std::int64_t ranks,
                             bool inverse = false) {
  std::vector<float> out(x.size());
  const std::int64_t row = nh * ne;
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t i = 0; i < t; ++i) {
      const std::int64_t p = load_balanced_position(i, t, ranks);
      const std::int64_t from = inverse ? i : p, to = inverse ? p : i;
      std::copy_n(x.begin() + (b * t + from) * row, row, out.begin() + (b * t + to) * row);
    }
  return out;
}

void check_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(double(got[i]) - want[i]) <= 2e-5 + 1e-5 * std::abs(double(want[i])))) ++bad;
  INFO(what << ": " << bad << " of " << got.size() << " elements beyond 2e-5 + 1e-5 |want|");
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("the balanced order gives rank c chunks c and 2C-1-c, and a copy there and back") {
  for (const std::int64_t ranks : {1, 2, 3, 4}) {
    CAPTURE(ranks);
    const std::int64_t chunk = 3, t = 2 * ranks * chunk;
    // Megatron's rule, stated as a list: the order's slots hold chunks 0, 2C-1, 1, 2C-2, ...
    std::vector<std::int64_t> slots;
    for (std::int64_t c = 0; c < ranks; ++c) {
      slots.push_back(c);
      slots.push_back(2 * ranks - 1 - c);
    }
    std::set<std::int64_t> seen;
    for (std::int64_t i = 0; i < t; ++i) {
      const std::int64_t p = load_balanced_position(i, t, ranks);
      CHECK(p == slots[static_cast<std::size_t>(i / chunk)] * chunk + i % chunk);
      seen.insert(p);
    }
    CHECK(seen.size() == static_cast<std::size_t>(t));  // a permutation of 0 .. t-1
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{static_cast<int>(ranks), 2}, [&](auto& rank) {
      std::vector<float> natural(static_cast<std::size_t>(nb * t * nh * ne));
      for (std::size_t i = 0; i < natural.size(); ++i) natural[i] = static_cast<float>(i);
      // Each rank's block of the balanced order: its two runs at the chunks the rule names.
      const auto q = tpx::from_global<float, B<>, T<X>, H<Y>, E<>>(
          rank, {B(nb), T(t), H(nh), E(ne)}, reordered(natural, t, ranks));
      const tpx::nn::local_positions runs = tpx::nn::positions_of<load_balanced<X>, 1>(q, "test");
      const std::int64_t c = rank.template coord<X>();
      REQUIRE(runs.count == 2);
      CHECK(runs.runs[0].index == 0);
      CHECK(runs.runs[0].position == c * chunk);
      CHECK(runs.runs[1].index == chunk);
      CHECK(runs.runs[1].position == (2 * ranks - 1 - c) * chunk);
      // A whole sequence in the order, into the order of positions and back.
      const auto whole = tpx::all_gather<X>(q);
      const auto in_positions = tpx::nn::copy_in_position_order<load_balanced<X>, 1>(whole, "t");
      CHECK(tpx::to_global(in_positions) == natural);
      CHECK(tpx::to_global(tpx::nn::copy_in_order<load_balanced<X>, 1>(in_positions, "t")) ==
            tpx::to_global(whole));
    });
  }
}

TEST_CASE("fused attention and rotary embedding in the balanced order equal the unsharded layers") {
  for (const auto& [mx_, my_, t_] : std::vector<std::tuple<int, int, std::int64_t>>{
           {1, 1, 24}, {2, 1, 24}, {3, 2, 72}, {4, 1, 72}}) {
    const int mx = mx_, my = my_;
    const std::int64_t t = t_;
    CAPTURE(mx);
    CAPTURE(my);
    CAPTURE(t);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{mx, my}, [&](auto& rank) {
      const auto natural = [&](std::uint64_t seed) {
        return tpx::to_global(
            tpx::randn<float, B<>, T<>, H<>, E<>>(rank, {B(nb), T(t), H(nh), E(ne)}, seed));
      };
      const std::vector<float> q = natural(1), k = natural(2), v = natural(3), dout = natural(4);
      // The reference: whole sequences in the order of positions, on every rank.
      const auto whole = [&](const std::vector<float>& x) {
        return tpx::from_global<float, B<>, T<>, H<>, E<>>(rank, {B(nb), T(t), H(nh), E(ne)}, x);
      };
      const auto rq = tpx::nn::rotary_forward<T>(whole(q));
      const auto rk = tpx::rename<T, S>(tpx::nn::rotary_forward<T>(whole(k)));
      const auto rv = tpx::rename<T, S>(whole(v));
      const auto want = tpx::nn::causal_attention_forward(rq, rk, rv);
      const auto want_grad = tpx::nn::causal_attention_backward(
          rq, rk, rv, want.probs, tpx::permute<B, H, T, E>(whole(dout)));
      // The balanced order: each rank's queries, keys gathered over X.
      using Order = load_balanced<X>;
      const auto block = [&](const std::vector<float>& x) {
        return tpx::from_global<float, B<>, T<X>, H<Y>, E<>>(rank, {B(nb), T(t), H(nh), E(ne)},
                                                             reordered(x, t, mx));
      };
      const auto bq = tpx::nn::rotary_forward<T, Order>(block(q));
      const auto bk = tpx::all_gather<X>(
          tpx::rename<T, S>(tpx::nn::rotary_forward<T, Order>(block(k))));
      const auto bv = tpx::all_gather<X>(tpx::rename<T, S>(block(v)));
      // Rotary: the same angles at the same positions, so the same bits.
      CHECK(reordered(tpx::to_global(bq), t, mx, true) == tpx::to_global(rq));
      const auto fwd = tpx::nn::fused_causal_attention_forward<Order>(bq, bk, bv);
      const auto grad = tpx::nn::fused_causal_attention_backward<Order>(bq, bk, bv, fwd.out,
                                                                       fwd.lse, block(dout));
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad.dk)>,
                                   tpx::Tensor<float, B<>, S<>, H<Y>, E<>, tpx::Unreduced<X>>>);
      const auto in_positions = [&](const auto& x) {
        return reordered(tpx::to_global(x), t, mx, true);
      };
      const auto heads_later = [](const auto& x) { return tpx::to_global(tpx::permute<B, T, H, E>(x)); };
      check_near(in_positions(fwd.out), heads_later(want.out), "out");
      check_near(in_positions(grad.dq), heads_later(want_grad.dq), "dq");
      check_near(in_positions(tpx::reduce_scatter<X, S>(grad.dk)),
                 tpx::to_global(tpx::permute<B, S, H, E>(want_grad.dk)), "dk");
      check_near(in_positions(tpx::reduce_scatter<X, S>(grad.dv)),
                 tpx::to_global(tpx::permute<B, S, H, E>(want_grad.dv)), "dv");
      // Rotary's backward turns the balanced gradient back as the unsharded one.
      CHECK(reordered(tpx::to_global(tpx::nn::rotary_backward<T, Order>(bq)), t, mx, true) ==
            tpx::to_global(tpx::nn::rotary_backward<T>(rq)));
    });
  }
}

TEST_CASE("the balanced order refuses a sequence it cannot cut into 2C chunks, naming it") {
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [&](auto& rank) {
    // 10 positions over 2 ranks: 4 chunks of 2.5.
    const auto q = tpx::randn<float, B<>, T<X>, H<>, E<>>(rank, {B(1), T(10), H(1), E(4)}, 1);
    const auto k = tpx::all_gather<X>(tpx::rename<T, S>(
        tpx::randn<float, B<>, T<X>, H<>, E<>>(rank, {B(1), T(10), H(1), E(4)}, 2)));
    const std::string rank_name = "(rank " + std::to_string(rank.world_rank()) + ")";
    const std::string says = "a load-balanced sequence of 10 positions cannot be cut into 2 x 2 "
                             "chunks of one length";
    try {
      (void)tpx::nn::fused_causal_attention_forward<load_balanced<X>>(q, k, k);
      FAIL("fused attention took 10 positions over 2 ranks");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK(what.find("fused_causal_attention_forward of [B, T_X, H, E] " + rank_name) !=
            std::string::npos);
      CHECK(what.find(says) != std::string::npos);
      CHECK(what.find("make it a multiple of 4") != std::string::npos);
    }
    try {
      (void)tpx::nn::rotary_forward<T, load_balanced<X>>(q);
      FAIL("rotary took 10 positions over 2 ranks");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("rotary_forward of [B, T_X, H, E] " + rank_name) !=
            std::string::npos);
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
  });
}

// The cases the property tests run: every sharding of a two-dim tensor on a mesh with axes X and
// Y, and the reference values and checks the tests compare tpx against.
//
// A dim is unsplit, split over X, over Y, over X then Y, or over Y then X; the tensor is
// optionally unreduced over X, Y or both. Of the 5 x 5 x 4 = 100 argument lists, the test decides
// which are valid shardings by its own rule (no axis used twice), independently of tpx's checks,
// and asserts that tpx agrees. Values come from a formula of the global index (value_at), so the
// reference needs no tpx code at all; an unreduced operand is built by giving each rank a share
// of the value (weights over the unreduced axes' coordinates that sum to one).
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <tpx/tpx.hpp>
#include <vector>

namespace cases {

TPX_MESH_AXES(X, Y);
TPX_DIMS(I, J, K);

using tpx::type_list;
using tpx::Unreduced;

using axis_options =
    type_list<type_list<>, type_list<X>, type_list<Y>, type_list<X, Y>, type_list<Y, X>>;
using unreduced_options = type_list<Unreduced<>, Unreduced<X>, Unreduced<Y>, Unreduced<X, Y>>;

template <class Axes>
constexpr unsigned mask_of = 0;
template <class... Axes>
constexpr unsigned mask_of<type_list<Axes...>> = ((std::is_same_v<Axes, X> ? 1u : 2u) | ... | 0u);
template <class... Axes>
constexpr unsigned mask_of<tpx::unreduced_over<Axes...>> = mask_of<type_list<Axes...>>;

template <template <class...> class D, class Axes>
struct dim_of;
template <template <class...> class D, class... Axes>
struct dim_of<D, type_list<Axes...>> {
  using type = D<Axes...>;
};

// One candidate argument list [P_a, Q_b]{U_u} and the test's own verdict on it.
template <template <class...> class P, template <class...> class Q, class A, class B, class U>
struct candidate {
  using first = typename dim_of<P, A>::type;
  using second = typename dim_of<Q, B>::type;
  static constexpr unsigned dims_mask = mask_of<A> | mask_of<B>;
  static constexpr bool valid = (mask_of<A> & mask_of<B>) == 0 && (dims_mask & mask_of<U>) == 0;
  static constexpr unsigned unreduced_mask = mask_of<U>;
  static constexpr unsigned uses = dims_mask | mask_of<U>;
};

template <class Cand, class U>
struct tensor_of;
template <class Cand, class... Us>
struct tensor_of<Cand, tpx::unreduced_over<Us...>> {
  using type =
      tpx::tensor_with_t<tpx::Tensor<float, typename Cand::first, typename Cand::second>,
                         type_list<typename Cand::first, typename Cand::second>, Unreduced<Us...>>;
};

// All 100 candidates for dims (P, Q).
template <template <class...> class P, template <class...> class Q, class A, class B, class Us>
struct with_each_unreduced;
template <template <class...> class P, template <class...> class Q, class A, class B, class... Us>
struct with_each_unreduced<P, Q, A, B, type_list<Us...>> {
  using type = type_list<candidate<P, Q, A, B, Us>...>;
};
template <template <class...> class P, template <class...> class Q, class A, class Bs>
struct with_each_second;
template <template <class...> class P, template <class...> class Q, class A, class... Bs>
struct with_each_second<P, Q, A, type_list<Bs...>> {
  using type = tpx::concat_t<typename with_each_unreduced<P, Q, A, Bs, unreduced_options>::type...>;
};
template <template <class...> class P, template <class...> class Q, class As>
struct with_each_first;
template <template <class...> class P, template <class...> class Q, class... As>
struct with_each_first<P, Q, type_list<As...>> {
  using type = tpx::concat_t<typename with_each_second<P, Q, As, axis_options>::type...>;
};
template <template <class...> class P, template <class...> class Q>
struct all_candidates {
  using type = typename with_each_first<P, Q, axis_options>::type;
};

// The valid candidates, as (candidate, tensor type) pairs.
template <class Cand, class U>
struct valid_case {
  using cand = Cand;
  using tensor = typename tensor_of<Cand, U>::type;
};
template <class List>
struct keep_valid;
template <template <class...> class P, template <class...> class Q, class... As, class... Bs,
          class... Us>
struct keep_valid<type_list<candidate<P, Q, As, Bs, Us>...>> {
  using type = tpx::concat_t<
      std::conditional_t<candidate<P, Q, As, Bs, Us>::valid,
                         type_list<valid_case<candidate<P, Q, As, Bs, Us>, Us>>, type_list<>>...>;
};
template <template <class...> class P, template <class...> class Q>
using valid_cases = typename keep_valid<typename all_candidates<P, Q>::type>::type;

// The global value of element `index` of operand `which`: a formula, not tpx code.
inline float value_at(int which, std::int64_t index) {
  return static_cast<float>(std::sin(0.7 * static_cast<double>(index) + 1.3 * which) +
                            0.25 * which);
}

// Rank's share of an unreduced value: weights over the unreduced axes' coordinates summing to 1.
template <class Tn, class R>
float share_of(const R& rank) {
  float w = 1.0f;
  [&]<class... Us>(tpx::unreduced_over<Us...>) {
    ((w *= static_cast<float>(rank.template coord<Us>() + 1) /
           static_cast<float>(rank.template size<Us>() * (rank.template size<Us>() + 1) / 2)),
     ...);
  }(typename Tn::unreduced{});
  return w;
}

template <class Fn, class Tn>
void for_each_local(const Tn& t, Fn&& fn) {
  const auto& ext = t.local_extents();
  std::int64_t at = 0;
  for (std::int64_t a = 0; a < ext[0]; ++a)
    for (std::int64_t b = 0; b < ext[1]; ++b, ++at)
      fn(at, t.local_offset(0) + a, t.local_offset(1) + b);
}

// Operand `which` of the given type and global shape, with values from value_at.
template <class Tn, class R>
Tn make_operand(const R& rank, std::int64_t rows, std::int64_t cols, int which) {
  Tn t(rank, typename Tn::shape_type(tpx::index_array<2>{rows, cols}));
  const float share = share_of<Tn>(rank);
  for_each_local(t, [&](std::int64_t at, std::int64_t r, std::int64_t c) {
    t.local()[at] = share * value_at(which, r * cols + c);
  });
  return t;
}

// Checks this rank's block of a non-unreduced tensor against the global reference, with
// |got - want| <= tol * scale[i] per element.
template <class Tn>
bool block_matches(const Tn& t, std::span<const double> want, std::span<const double> scale,
                   double tol) {
  bool ok = true;
  const std::int64_t cols = t.global_extent(1);
  for_each_local(t, [&](std::int64_t at, std::int64_t r, std::int64_t c) {
    const std::size_t g = static_cast<std::size_t>(r * cols + c);
    if (std::abs(static_cast<double>(t.local()[at]) - want[g]) > tol * scale[g]) ok = false;
  });
  return ok;
}

// What the ranks of a property test found, collected across their threads.
struct tally {
  std::atomic<int> checked{0};
  std::mutex mutex;
  std::vector<std::string> failures;
  void fail(std::string what) {
    std::lock_guard lock(mutex);
    failures.push_back(std::move(what));
  }
};

}  // namespace cases

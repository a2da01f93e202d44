// The shape of tpx's host loops over independent elements, written so that compilers vectorize
// them at the optimization level users build with, without extra flags, and with the widest
// vectors the machine has.
//
// GCC (12 and later) vectorizes at -O2 under its "very cheap" cost model: only a loop whose trip
// count is a known multiple of the vector width, and whose iterations it can prove independent
// without a run-time check. A plain `for (i < n) out[i] = f(in[i])` is neither (n is arbitrary,
// and out may alias in), so it stays scalar unless the user builds with -O3. for_each_index
// therefore runs the body in blocks of 16 indices (every vector width up to AVX-512 divides 16),
// each block a loop of constant trip count marked as having independent iterations, then the few
// remaining indices in a plain loop. The mark is a promise the callers keep: iteration i touches
// only the elements of index i (an output may be one of the inputs, in place, but never overlap
// one at an offset). Clang honours its own spelling of the mark; nvcc's host pass gets none.
//
// x86-64's baseline, what a build without -march gets, has only 4-wide SSE2 vectors; nearly every
// x86-64 machine in use has AVX2 and FMA (8 wide, a multiply-add in one instruction), which make
// these loops 2-3x faster again. So on x86-64 with GCC or Clang each loop is compiled twice, for
// the baseline and for AVX2 + FMA (a function attribute, no flag), and the AVX2 one runs when the
// CPU has it (one check, cached). Host results can then differ in the last bit between machines
// with and without FMA, as BLAS results already do; on one machine they are always the same.
//
// fold_in_lanes is the same for a reduction (a sum, a maximum): a serial fold is one chain of
// dependent additions that neither vectorizes (floating-point addition does not reassociate) nor
// pipelines. It folds element i into lane i % 16 instead, and combines the 16 lanes in order at
// the end: 16 independent chains, which vectorize, in an order fixed by n alone, so the result is
// the same on every run and with any number of ranks or threads.
//
// The bodies are kernels/ functors applied at index i, so vectorization also needs their math to
// be free of calls into libm: see kernels/vectorizable_expf.hpp.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TPX_INDEPENDENT_ITERATIONS
#elif defined(__clang__)
#define TPX_INDEPENDENT_ITERATIONS _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define TPX_INDEPENDENT_ITERATIONS _Pragma("GCC ivdep")
#else
#define TPX_INDEPENDENT_ITERATIONS
#endif

// GCC keeps fold_in_lanes' 16 lanes in registers only when the loop over them is unrolled
// (otherwise every block loads and stores them: 2.7x slower); Clang does without being told.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define TPX_UNROLL_LANES _Pragma("GCC unroll 16")
#else
#define TPX_UNROLL_LANES
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__) && \
    !(defined(__AVX2__) && defined(__FMA__))
#define TPX_HOST_LOOP_AVX2 1
#else
#define TPX_HOST_LOOP_AVX2 0
#endif

// Clang warns when a loop it was told is safe does not vectorize (a body that calls a function,
// or converts bf16); that is expected of some bodies, and the loop still runs, scalar.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

// GCC 12 warns, at -O2 and above, that a block of 16 indexes past the end of a buffer whose
// allocation it sees inlined, when that buffer is shorter than a block (a scalar tensor's one
// element): it does not relate n to the buffer's size, and the block runs only when n >= 16. The
// loops index [0, n) alone, so the warning is silenced here, and only here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif

namespace tpx::kernels {

// How many indices for_each_index runs as one vector block, and fold_in_lanes folds into as
// many lanes: a loop over a multiple of it has no scalar remainder.
inline constexpr std::int64_t host_loop_block = 16;

namespace host_loop_detail {
template <class Body>
[[gnu::always_inline]] inline void blocks_then_rest(std::int64_t n, const Body& body) {
  constexpr std::int64_t block = host_loop_block;
  const std::int64_t whole = n / block * block;
  for (std::int64_t first = 0; first < whole; first += block) {
    TPX_INDEPENDENT_ITERATIONS
    for (std::int64_t i = first; i < first + block; ++i) body(i);
  }
  for (std::int64_t i = whole; i < n; ++i) body(i);
}

constexpr int fold_lanes = static_cast<int>(host_loop_block);  // as TPX_UNROLL_LANES says

template <class R, class Term>
[[gnu::always_inline]] inline typename R::value_type lanes_then_rest(std::int64_t n,
                                                                     const Term& term) {
  using Acc = typename R::value_type;
  Acc lane[fold_lanes];
  for (int l = 0; l < fold_lanes; ++l) lane[l] = R::identity();
  const std::int64_t whole = n / fold_lanes * fold_lanes;
  for (std::int64_t first = 0; first < whole; first += fold_lanes) {
    TPX_UNROLL_LANES
    for (int l = 0; l < fold_lanes; ++l) lane[l] = R::combine(lane[l], term(first + l));
  }
  for (std::int64_t i = whole; i < n; ++i) lane[i - whole] = R::combine(lane[i - whole], term(i));
  Acc total = lane[0];
  for (int l = 1; l < fold_lanes; ++l) total = R::combine(total, lane[l]);
  return total;
}

// Clang reports a marked loop that it did not vectorize (at -O1 it vectorizes none) at the
// function the loop ends up in when the build has no debug locations: inlined into a caller, at
// the caller, outside this file's silencing above. So under Clang the loop is a function of its
// own, here: one call per loop, as the AVX2 path below already makes (GCC's stays inlined).
template <class Body>
#if defined(__clang__)
[[gnu::noinline]] void for_each_index_baseline(std::int64_t n, Body body) {
#else
[[gnu::always_inline]] inline void for_each_index_baseline(std::int64_t n, Body body) {
#endif
  blocks_then_rest(n, body);
}

#if TPX_HOST_LOOP_AVX2
template <class Body>
__attribute__((target("avx2,fma"))) void for_each_index_avx2(std::int64_t n, Body body) {
  blocks_then_rest(n, body);
}

template <class R, class Term>
__attribute__((target("avx2,fma"))) typename R::value_type fold_in_lanes_avx2(std::int64_t n,
                                                                              Term term) {
  return lanes_then_rest<R>(n, term);
}

inline bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif
}  // namespace host_loop_detail

// body(i) for every i in [0, n), iterations independent (see above). The body is taken by value,
// and should hold what it uses by value (a lambda with [=]): then the compiler knows that the
// loop's stores cannot change the body's own fields (a functor's float parameters, the
// pointers), which it must otherwise reload after every store, and the loop does not vectorize.
template <class Body>
inline void for_each_index(std::int64_t n, Body body) {
#if TPX_HOST_LOOP_AVX2
  if (host_loop_detail::cpu_has_avx2_fma()) return host_loop_detail::for_each_index_avx2(n, body);
#endif
  host_loop_detail::for_each_index_baseline(n, body);
}

// The fold with reducer R (kernels/reduction.hpp) of term(i) over i in [0, n), in 16 lanes (see
// above); term(i) is what R::element makes of element i, in R::value_type. term, like
// for_each_index's body, is taken by value.
template <class R, class Term>
inline typename R::value_type fold_in_lanes(std::int64_t n, Term term) {
#if TPX_HOST_LOOP_AVX2
  if (host_loop_detail::cpu_has_avx2_fma()) return host_loop_detail::fold_in_lanes_avx2<R>(n, term);
#endif
  return host_loop_detail::lanes_then_rest<R>(n, term);
}

}  // namespace tpx::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

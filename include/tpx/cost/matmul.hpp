// Predicted time of a sharded matmul and of a reshard, read off the plans tpx::matmul and
// tpx::reshard compile: the notes' T_math and T_comm, per device, before a byte moves.
//
//   auto e = tpx::cost::predict_matmul<Tensor<float, B<X>, D<>>, Tensor<float, D<X>, F<>>>(
//       sys, {B(4096), D(8192)}, {D(8192), F(28672)}, /*bytes per element*/ 2);
//   e.comm.seconds   // AllGather<X>(rhs, D): (X-1)/X * D*F*2 bytes over W
//   e.math_seconds   // 2 * (B/X) * D * F / C
//
// The local GEMM is priced by the roofline (seed 001): it performs 2 m k n FLOPs on the blocks
// the plan leaves on each device and touches its three blocks once, so it takes
// max(FLOPs / C, bytes / memory bandwidth). The collectives are priced by cost/collectives.hpp
// from matmul_plan_t<L, R>::lhs_steps and ::rhs_steps. Sizes are averages over ranks (a dim that
// does not divide evenly is priced as if it did). The communication is assumed not to overlap
// the GEMM, as tpx's host backend runs them (seconds()); overlapped() is the ideal schedule.
#pragma once

#include <algorithm>
#include <array>

#include "tpx/cost/collectives.hpp"
#include "tpx/ops/matmul.hpp"
#include "tpx/ops/reshard.hpp"

namespace tpx::cost {

struct op_estimate {
  double flops = 0;           // per device
  double math_seconds = 0;    // flops / C
  double memory_seconds = 0;  // bytes of the GEMM's blocks / memory bandwidth
  comm_estimate comm;

  constexpr double compute_seconds() const { return std::max(math_seconds, memory_seconds); }
  constexpr double seconds() const { return compute_seconds() + comm.seconds; }
  constexpr double overlapped() const { return std::max(compute_seconds(), comm.seconds); }
  // Which one bounds the op when communication overlaps computation.
  constexpr bool comm_bound() const { return comm.seconds > compute_seconds(); }

  constexpr op_estimate& operator+=(const op_estimate& o) {
    flops += o.flops;
    math_seconds += o.math_seconds;
    memory_seconds += o.memory_seconds;
    comm += o.comm;
    return *this;
  }
};

// matmul(l, r) for l of type L with global extents lhs (in L's dim order) and r of type R with
// global extents rhs, elements of bpe bytes.
template <class L, class R, class Sys>
constexpr op_estimate predict_matmul(const Sys& sys, std::array<double, 2> lhs,
                                     std::array<double, 2> rhs, double bpe) {
  using plan = matmul_plan_t<L, R>;
  static_assert(plan::possible, "tpx::cost::predict_matmul: the operands cannot be multiplied");
  using Result = typename plan::result;
  constexpr int jl = plan::plan.lhs_contract, jr = plan::plan.rhs_contract;
  const double m = lhs[1 - jl], k = lhs[jl], n = rhs[1 - jr];

  op_estimate e;
  double lhs_local = m * k / shard_count<L>(sys.mesh);
  double rhs_local = k * n / shard_count<R>(sys.mesh);
  e.comm += steps_cost<L>(typename plan::lhs_steps{}, lhs_local, sys, bpe);
  e.comm += steps_cost<R>(typename plan::rhs_steps{}, rhs_local, sys, bpe);
  const double out_local = m * n / shard_count<Result>(sys.mesh);
  // The result's first dim is the lhs's free dim, split as the lhs is after its steps.
  const double m_local = m / split_of<type_at_t<0, typename Result::dims>>(sys.mesh);
  const double k_local = lhs_local / m_local;
  e.flops = 2 * out_local * k_local;
  e.math_seconds = e.flops / sys.hardware.flops;
  e.memory_seconds = (lhs_local + rhs_local + out_local) * bpe / sys.hardware.memory_bw;
  return e;
}

// reshard<To>(t) for t of type From with `elements` global elements of bpe bytes.
template <class From, class To, class Sys>
constexpr comm_estimate predict_reshard(const Sys& sys, double elements, double bpe) {
  using traits = reshard_traits<From, To>;
  static_assert(traits::possible, "tpx::cost::predict_reshard: no plan from From to To");
  double local = elements / shard_count<From>(sys.mesh);
  return steps_cost<From>(typename traits::steps{}, local, sys, bpe);
}

}  // namespace tpx::cost

// Naive causal attention in double, the reference for the tensor-core attention kernels on the
// host (tests/unit/flash_attention_test.cpp, on an emulated block) and on the GPU
// (tests/cuda/kernels_test.cu): [sequences, T, E] bf16 inputs, every output and gradient from
// the definitions (softmax of scale q.k over keys s <= t; dv = p dout, ds = p (dp - delta),
// dq = scale ds k, dk = scale ds q), the comparison both use, and the move of rows between
// that heads-first order and the projections' [B, T, H, E], which the kernels also read in place.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tpx/core/bfloat16.hpp>
#include <tpx/kernels/random.hpp>
#include <vector>

namespace tpx::testing {

struct attention_case {
  std::int64_t sequences, t_len;
};

// out, lse, delta and, for dout, the gradients; and for dq and dk the sums of their terms'
// magnitudes, the scale of their rounding error: ds = p (dp - delta) cancels (exactly, at T = 1,
// where dq and dk are 0 but the kernel's bf16 dp and delta leave about 1e-7).
struct naive_attention {
  std::vector<double> out, lse, dq, dk, dv, delta, dq_terms, dk_terms;
  naive_attention(const attention_case& c, int e, const std::vector<tpx::bf16>& q,
                  const std::vector<tpx::bf16>& k, const std::vector<tpx::bf16>& v,
                  const std::vector<tpx::bf16>& dout) {
    const std::int64_t n = c.sequences * c.t_len;
    out.assign(n * e, 0.0);
    dq = dk = dv = dq_terms = dk_terms = out;
    lse.assign(n, 0.0);
    delta = lse;
    const double scale = 1.0 / std::sqrt(double(e));
    for (std::int64_t sq = 0; sq < c.sequences; ++sq)
      for (std::int64_t t = 0; t < c.t_len; ++t) {
        const std::int64_t rt = sq * c.t_len + t;
        std::vector<double> x(t + 1), p(t + 1), dp(t + 1);
        double m = -INFINITY, l = 0;
        for (std::int64_t s = 0; s <= t; ++s) {
          x[s] = 0;
          for (int i = 0; i < e; ++i)
            x[s] += double(q[rt * e + i]) * double(k[(sq * c.t_len + s) * e + i]);
          x[s] *= scale;
          m = std::max(m, x[s]);
        }
        for (std::int64_t s = 0; s <= t; ++s) l += std::exp(x[s] - m);
        lse[rt] = m + std::log(l);
        for (std::int64_t s = 0; s <= t; ++s) {
          p[s] = std::exp(x[s] - lse[rt]);
          dp[s] = 0;
          for (int i = 0; i < e; ++i) {
            out[rt * e + i] += p[s] * double(v[(sq * c.t_len + s) * e + i]);
            dp[s] += double(dout[rt * e + i]) * double(v[(sq * c.t_len + s) * e + i]);
          }
          delta[rt] += p[s] * dp[s];
        }
        for (std::int64_t s = 0; s <= t; ++s) {
          const std::int64_t rs = sq * c.t_len + s;
          const double ds = p[s] * (dp[s] - delta[rt]);
          const double ds_terms = p[s] * (std::abs(dp[s]) + std::abs(delta[rt]));
          for (int i = 0; i < e; ++i) {
            dq[rt * e + i] += scale * ds * double(k[rs * e + i]);
            dk[rs * e + i] += scale * ds * double(q[rt * e + i]);
            dq_terms[rt * e + i] += scale * ds_terms * std::abs(double(k[rs * e + i]));
            dk_terms[rs * e + i] += scale * ds_terms * std::abs(double(q[rt * e + i]));
            dv[rs * e + i] += p[s] * double(dout[rt * e + i]);
          }
        }
      }
  }
};

// n draws of a standard normal, rounded to bf16.
inline std::vector<tpx::bf16> draws(std::int64_t n, std::uint64_t seed) {
  std::vector<tpx::bf16> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    x[i] = tpx::bf16(tpx::kernels::normal_at(seed, static_cast<std::uint64_t>(i)));
  return x;
}

// Checks got against want within 1e-2 of want's largest magnitude plus 1e-2 relative (bf16
// outputs, P and dS rounded to bf16 inside the kernels), naming the first few elements off; a
// NaN is off. Given the sums of its terms' magnitudes, a tenth of their largest floors that
// scale, for gradients that cancel to about 0.
inline void check_close(const std::string& what, const std::vector<tpx::bf16>& got,
                        const std::vector<double>& want, const std::vector<double>& terms = {}) {
  double largest = 0;
  for (double w : want) largest = std::max(largest, std::abs(w));
  for (double w : terms) largest = std::max(largest, 0.1 * w);
  int wrong = 0;
  for (std::size_t i = 0; i < want.size(); ++i)  // written so that a NaN is off too
    if (!(std::abs(double(got[i]) - want[i]) <= 1e-2 * largest + 1e-2 * std::abs(want[i])) &&
        ++wrong <= 3)
      FAIL_CHECK(what << "[" << i << "] = " << float(got[i]) << ", want " << want[i] << " (largest "
                      << largest << ")");
  CHECK_MESSAGE(wrong == 0, what << ": " << wrong << " of " << want.size() << " elements off");
}

// Rows of `width` elements: from heads-first [sequences, T, width] to heads interleaved (row t of
// sequence s = b * heads + h at ((b * T + t) * heads + h), written out here independently of
// attention_layout::row_of), and back.
template <class V>
V interleaved(const V& heads_first, std::int64_t t_len, std::int64_t heads, std::int64_t width,
              bool back = false) {
  V out(heads_first.size());
  const std::int64_t sequences = static_cast<std::int64_t>(heads_first.size()) / (t_len * width);
  for (std::int64_t s = 0; s < sequences; ++s)
    for (std::int64_t t = 0; t < t_len; ++t)
      for (std::int64_t i = 0; i < width; ++i) {
        const std::int64_t first = (s * t_len + t) * width + i;
        const std::int64_t spread = (((s / heads) * t_len + t) * heads + s % heads) * width + i;
        out[static_cast<std::size_t>(back ? first : spread)] =
            heads_first[static_cast<std::size_t>(back ? spread : first)];
      }
  return out;
}

}  // namespace tpx::testing

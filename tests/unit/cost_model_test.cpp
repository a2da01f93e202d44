// The cost model (include/tpx/cost/) against the notes' worked numbers (seed 001 and
// shared/research/performance.md 4): FSDP and DP are compute bound above C/W tokens per device
// (2550 on a TPU v5p ICI axis, 2550/n_axes over n_axes axes, about 2200 on H100 NVLink), and
// tensor parallelism stays compute bound while Y < n_axes F W / C (about F/2200 on H100). Every
// number is computed by the model's own predictions of the typed layers (cost/bounds.hpp), not
// by restating the formula. The collectives each layout's plan prices are checked too, some of
// them at compile time, since the model is constexpr.
#include <doctest/doctest.h>

#include <tpx/cost/bounds.hpp>

namespace {

using namespace tpx::cost;
using namespace tpx::cost::mlp;

constexpr double bf16_bytes = 2;
constexpr shape llama_like{.batch = 4e6, .d_model = 8192, .d_ff = 28672};

// The notes price collectives by link bandwidth alone, so their numbers are reproduced with
// price_packing off (the last test case shows what packing adds).
constexpr cluster<mesh> on(const hardware_profile& hw, int x, int y, double x_links = 1,
                           double y_links = 1) {
  return {mesh{x, y}, hw, {x_links, y_links}, /*price_packing=*/false};
}

// The plans behind the predictions, at compile time: which collectives each layout runs.
static_assert(predict_layer<dp>(on(h100_sxm, 8, 1), llama_like, 2).forward.comm.collectives == 0,
              "DP's forward pass communicates nothing");
static_assert(predict_layer<dp>(on(h100_sxm, 8, 1), llama_like, 2).backward.comm.collectives == 2,
              "DP's backward pass all-reduces the two weight gradients");
static_assert(predict_layer<fsdp>(on(h100_sxm, 8, 1), llama_like, 2).forward.comm.collectives == 2,
              "FSDP's forward pass all-gathers W_in and W_out");
static_assert(predict_layer<tp>(on(h100_sxm, 1, 8), llama_like, 2).forward.comm.collectives == 2,
              "TP's forward pass gathers In and reduce-scatters Out");
static_assert(predict_layer<fsdp_tp>(on(h100_sxm, 4, 2), llama_like, 2).forward.comm.collectives ==
                  4,
              "FSDP+TP's forward pass does both");
// The backward step lists, as bench/matmul_strategies.cpp runs them with apply<adjoint_t<...>>.
static_assert(predict_layer<fsdp>(on(h100_sxm, 8, 1), llama_like, 2).backward.comm.collectives == 4,
              "FSDP's backward pass reduce-scatters both gradients and gathers both weights again");
static_assert(predict_layer<tp>(on(h100_sxm, 1, 8), llama_like, 2).backward.comm.collectives == 2,
              "TP's backward pass gathers dOut and reduce-scatters dIn");
static_assert(predict_layer<fsdp_tp>(on(h100_sxm, 4, 2), llama_like, 2).backward.comm.collectives ==
                  6,
              "FSDP+TP's backward pass does both");

TEST_CASE("FSDP's weight gathers move (X-1)/X of both weights, per the nccl-tests bus factor") {
  const int x = 8;
  const layer_estimate e = predict_layer<fsdp>(on(h100_sxm, x, 1), llama_like, bf16_bytes);
  const double weights = 2 * llama_like.d_model * llama_like.d_ff * bf16_bytes;
  CHECK(e.forward.comm.bus_bytes == doctest::Approx(weights * (x - 1) / x));
  CHECK(e.forward.comm.seconds == doctest::Approx(weights * (x - 1) / x / h100_sxm.link_bw));
  // 2 GEMMs of 2 (B/X) D F FLOPs each.
  CHECK(e.forward.flops ==
        doctest::Approx(2 * 2 * llama_like.batch / x * llama_like.d_model * llama_like.d_ff));
  CHECK(e.backward.flops == doctest::Approx(2 * e.forward.flops));
  // Parameters, gradients and Adam state at 16 bytes per parameter, split X ways.
  CHECK(e.state_bytes == doctest::Approx(16 * 2 * llama_like.d_model * llama_like.d_ff / x));
}

TEST_CASE("FSDP and DP are compute bound above C/W tokens per device (the notes' 2550, 2200)") {
  const int x = 1024;  // many devices, so (X-1)/X ~ 1 as the notes assume
  const double tpu = min_tokens_per_device<fsdp>(on(tpu_v5p, x, 1), llama_like, bf16_bytes);
  CHECK(tpu == doctest::Approx(2550).epsilon(0.005));
  for (double n_axes : {2.0, 3.0}) {
    const double over_axes =
        min_tokens_per_device<fsdp>(on(tpu_v5p, x, 1, n_axes), llama_like, bf16_bytes);
    CHECK(over_axes == doctest::Approx(2550 / n_axes).epsilon(0.005));  // 850 over 3 axes
  }
  const double h100 = min_tokens_per_device<fsdp>(on(h100_sxm, x, 1), llama_like, bf16_bytes);
  CHECK(h100 == doctest::Approx(2200).epsilon(0.005));
  const double dp_h100 = min_tokens_per_device<dp>(on(h100_sxm, x, 1), llama_like, bf16_bytes);
  CHECK(dp_h100 == doctest::Approx(h100));
  // Independent of the model's width: the bound is a property of the hardware.
  CHECK(min_tokens_per_device<fsdp>(on(h100_sxm, x, 1), {4e6, 2048, 8192}, bf16_bytes) ==
        doctest::Approx(h100));
}

TEST_CASE("Tensor parallelism is compute bound while Y < n_axes F W / C (F/2200 on H100)") {
  const int h100 = max_compute_bound_degree<tp>(on(h100_sxm, 1, 1), llama_like, bf16_bytes);
  const double notes_h100 = llama_like.d_ff / 2200;  // 13.0: "about 8-16-way"
  CHECK(h100 >= notes_h100 - 1);
  CHECK(h100 <= notes_h100 + 1);
  // Over three TPU v5p ICI axes: Y < 3 F / 2550.
  const shape wide{.batch = 4e6, .d_model = 8192, .d_ff = 30000};
  const int tpu = max_compute_bound_degree<tp>(on(tpu_v5p, 1, 1, 1, 3), wide, bf16_bytes);
  CHECK(tpu >= 3 * wide.d_ff / 2550 - 1);
  CHECK(tpu <= 3 * wide.d_ff / 2550 + 1);
}

TEST_CASE("Gathering an inner dim costs a packing copy at memory bandwidth when priced") {
  cluster<mesh> packing = on(h100_sxm, 8, 1);
  packing.price_packing = true;
  const op_estimate priced = predict_layer<fsdp>(packing, llama_like, bf16_bytes).forward;
  const op_estimate plain = predict_layer<fsdp>(on(h100_sxm, 8, 1), llama_like, bf16_bytes).forward;
  // W_in[D_X, F] gathers its first dim in place; W_out[F, D_X] gathers D, its second, packed.
  const double w_out_bytes = llama_like.d_model * llama_like.d_ff * bf16_bytes;
  CHECK(priced.comm.packed_bytes == doctest::Approx(2 * w_out_bytes));
  CHECK(priced.comm.seconds - plain.comm.seconds ==
        doctest::Approx(2 * w_out_bytes / h100_sxm.memory_bw));
  CHECK(priced.comm.bus_bytes == doctest::Approx(plain.comm.bus_bytes));
}

TEST_CASE("The FLOP ceiling: compute-bound layouts reach 1, communication-bound ones less") {
  const shape small_batch{.batch = 8 * 256, .d_model = 8192, .d_ff = 28672};  // 256 per device
  const layer_estimate fsdp_small = predict_layer<fsdp>(on(h100_sxm, 8, 1), small_batch, 2);
  CHECK(fsdp_small.step().comm_bound());
  CHECK(fsdp_small.mfu_ceiling() < 0.2);
  const layer_estimate fsdp_large = predict_layer<fsdp>(on(h100_sxm, 8, 1), llama_like, 2);
  CHECK_FALSE(fsdp_large.step().comm_bound());
  CHECK(fsdp_large.mfu_ceiling() == doctest::Approx(1));
}

}  // namespace

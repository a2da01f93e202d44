// Hardware profiles for tpx's cost model: the few numbers a roofline needs, per device.
//
//   flops       peak dense FLOP/s of one device in the model's compute type (bf16 for the
//               accelerators below), the notes' C
//   memory_bw   bytes/s between the device and its memory (HBM), reads and writes together
//               (a copy of S bytes moves 2 S)
//   link_bw     bytes/s one device moves per mesh axis in one direction, the notes' W: for a
//               collective this is nccl-tests' bus bandwidth, so a collective of bus factor f
//               over S bytes takes f * S / link_bw (cost/collectives.hpp)
//   memory      bytes of device memory
//
// The accelerator figures are the public specs gathered in shared/research/performance.md
// (section 1 and the Scaling Book rules of section 4), except A100, which that file does not
// list: its figures are NVIDIA's A100 SXM4 80GB datasheet. A profile for a machine that was
// measured rather than specified (tpx's host backend, from bench/) is made with the same struct.
// Everything is constexpr, so a plan's cost can be a compile-time constant.
#pragma once

#include <string_view>

namespace tpx::cost {

struct hardware_profile {
  std::string_view name;
  double flops = 0;      // FLOP/s per device
  double memory_bw = 0;  // bytes/s per device
  double link_bw = 0;    // bytes/s per device per mesh axis, one direction
  double memory = 0;     // bytes per device
  std::string_view source;

  // The notes' C / W: the per-device batch (in tokens) at which a weight-gathering layer's
  // compute time equals its communication time on one axis.
  constexpr double flops_per_link_byte() const { return flops / link_bw; }
};

// 989 TFLOP/s bf16 dense; 3.35 TB/s HBM3; NVLink4 450 GB/s per direction; 80 GB.
inline constexpr hardware_profile h100_sxm{
    "H100 SXM",
    989e12,
    3.35e12,
    450e9,
    80e9,
    "performance.md 1 (glennklockwood H100 page, hpctech HBM figure, NVIDIA/nccl#1442 for "
    "NVLink); C/W = 2200 as Scaling Book gpus.md"};

// Same die as H100 (9.9e14 FLOP/s), 4.8 TB/s HBM3e, same NVLink4, 141 GB.
inline constexpr hardware_profile h200{
    "H200", 990e12, 4.8e12, 450e9, 141e9, "performance.md 1 (Scaling Book gpus.md spec table)"};

// 312 TFLOP/s bf16 dense; 2.039 TB/s HBM2e; NVLink3 600 GB/s both directions = 300 each; 80 GB.
inline constexpr hardware_profile a100_sxm{
    "A100 SXM 80GB", 312e12, 2.039e12,
    300e9,           80e9,   "NVIDIA A100 datasheet (not in performance.md)"};

// 4.59e14 FLOP/s bf16; 2.765 TB/s HBM; ICI 1.8e11 B/s per axis (the notes: C/W = 2550); 95 GB.
inline constexpr hardware_profile tpu_v5p{
    "TPU v5p",
    4.59e14,
    2.765e12,
    1.8e11,
    95e9,
    "seed 001 and performance.md 4 (Scaling Book training.md: C = 4.59e14, W_ici = 1.8e11)"};

inline constexpr hardware_profile published_profiles[] = {h100_sxm, h200, a100_sxm, tpu_v5p};

}  // namespace tpx::cost

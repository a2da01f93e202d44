// tpx-bench-cuda: tpx's CUDA benchmarks, one program with a subcommand per question.
//
//   tpx-bench-cuda gemm -b 1024 -e 8192 -t fp32,tf32,bf16,fp16 --json gemm.json
//       TFLOP/s of tpx's GEMM vs cuBLASLt called directly (target: ratio >= 0.95)
//   tpx-bench-cuda gelu -s 16384x3072x768,8192x4096x1024 -t bf16,fp32 --json gelu.json
//       ms of the MLP's up projection with GELU fused into the GEMM (cuBLASLt's GELU_AUX and
//       DGELU epilogues) vs the GEMM then the elementwise kernel, forward and backward
//   tpx-bench-cuda kernels -N 64M -d 4096 --json kernels.json
//       GB/s of the elementwise, norm, softmax and AdamW kernels vs a device memcpy (target:
//       ratio >= 0.8 for elementwise and norms)
//   tpx-bench-cuda attention -B 16 -H 12 -T 1024,4096 -E 64 -t bf16,fp32 --json attention.json
//       ms and TFLOP/s of the fused causal attention kernels, forward and backward, to set beside
//       PyTorch's SDPA (bench/peers/torch_sdpa.py; target: tpx >= 0.9x); heads first, or with
//       --layout tokens in the GPT's [B, T, H, E]; with --context-parallel X also each rank's
//       block of T / X queries against the T keys, as context parallelism calls the kernels;
//       with --kv-heads G grouped-query attention, G key and value heads for the H query heads
//   tpx-bench-cuda attention-tilings -B 16 -H 12 -T 1024,4096 -E 64,128 --json tilings.json
//       the same for the tensor-core kernels under the tilings attention_tilings.cu lists, bf16,
//       the kernels' own first
//     (both exit with 1 if a row's result is off the host twin's by more than bf16's rounding
//     allows: max rel diff above 0.02)
//   tpx-bench-cuda collectives [--nccl] -g 4 -b 1K -e 256M --json collectives.json
//       nccl-tests' table for the simulated mesh (-g ranks on GPU 0) or NCCL (one GPU per rank)
//
// Without a GPU it prints "skipped: no CUDA device (...)" and exits with 77, CTest's skip code
// in the bench tests. The measuring is in gemm.cu (gemm, gelu), kernels.cu, attention.cu,
// attention_tilings.cu and collectives.cu (measure.hpp); this file parses the command line,
// prints the tables and writes the JSON of bench/support/report.hpp.
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "../support/report.hpp"
#include "../support/sizes.hpp"
#include "measure.hpp"
#include "tpx/cuda/device.hpp"

namespace {

using nlohmann::json;
namespace b = tpx::bench;
namespace bc = tpx::bench::cuda;

constexpr int skipped = 77;

struct common_options {
  int iters = 20, warmup = 5;
  std::string json;
};

void add_common(CLI::App& app, common_options& o) {
  app.add_option("-n,--iters", o.iters, "timed calls")->check(CLI::Range(1, 1 << 30));
  app.add_option("-w,--warmup_iters", o.warmup, "untimed calls first")->check(CLI::Range(0, 1 << 30));
  app.add_option("--json", o.json, "write every row to this file as JSON");
}

// The attention benches' sequences: -B x -H of each length in -T (GPT-2's 16 x 12 by default),
// heads first or (--layout tokens) [B, T, H, E] as the GPT's layers pass them; attention's
// --context-parallel X adds the rows of each rank's block of queries, its --kv-heads G makes it
// grouped-query attention (0: G = H, multi-head).
struct attention_shape {
  std::int64_t batch = 16, heads = 12, kv_heads = 0;
  std::vector<std::int64_t> lengths = {1024, 4096};
  std::string layout = "heads";
  int context_parallel = 1;
  bool tokens() const { return layout == "tokens"; }
  std::int64_t key_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  std::string described() const {
    std::string d = tokens() ? "[B, T, H, E] read in place" : "heads first, [B x H, T, E]";
    if (key_heads() != heads)
      d.append(", grouped-query: ")
          .append(std::to_string(key_heads()))
          .append(" key and value heads, ")
          .append(tokens() ? "[B, T, G, E]" : "[B x G, T, E]");
    return d;
  }
};

void add_attention_shape(CLI::App& app, attention_shape& s) {
  app.add_option("-B,--batch", s.batch, "batch")->check(CLI::Range(1, 1 << 20));
  app.add_option("-H,--heads", s.heads, "heads (batch x heads sequences)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-T,--lengths", s.lengths, "sequence lengths T")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--layout", s.layout,
                 "heads ([B x H, T, E], as SDPA's peer) or tokens ([B, T, H, E], as the GPT)")
      ->check(CLI::IsMember({"heads", "tokens"}));
}

int run_gemm(const std::vector<std::int64_t>& sizes, const std::vector<std::string>& types, const common_options& o,
             const std::string& command) {
  std::printf("# tpx-bench-cuda gemm: C = A B, m = n = k, tpx (device_space::gemm) vs cuBLASLt direct\n");
  std::printf("# %6s %7s %12s %14s %7s %10s\n", "type", "size", "tpx TFLOP/s", "direct TFLOP/s", "ratio", "max|diff|");
  json rows = json::array();
  for (const bc::gemm_row& r : bc::measure_gemm(sizes, types, o.iters, o.warmup)) {
    std::printf("  %6s %7lld %12.1f %14.1f %7.3f %10.3g\n", r.type.c_str(), static_cast<long long>(r.size),
                r.tpx_tflops, r.direct_tflops, r.ratio, r.max_diff);
    rows.push_back({{"type", r.type}, {"m", r.size}, {"n", r.size}, {"k", r.size}, {"tpx_tflops", r.tpx_tflops},
                    {"direct_tflops", r.direct_tflops}, {"ratio", r.ratio}, {"max_diff", r.max_diff}});
  }
  if (!o.json.empty()) b::write_json(o.json, "cuda_gemm", command, {{"iters", o.iters}, {"warmup", o.warmup}}, rows);
  return 0;
}

int run_gelu(const std::vector<std::string>& shapes, const std::vector<std::string>& types, const common_options& o,
             const std::string& command) {
  std::printf("# tpx-bench-cuda gelu: out = GELU(A B) keeping A B, and grad = (G C^T) * GELU'(A B),\n");
  std::printf("# fused into cuBLASLt's epilogue (device_space::gemm_gelu, gemm_gelu_backward) vs the GEMM then\n");
  std::printf("# the elementwise kernel; fp32 multiplies on TF32\n");
  std::printf("# %5s %6s %6s %6s %11s %11s %7s %11s %11s %7s %13s\n", "type", "m", "n", "k", "fwd fused", "fwd unfused",
              "gain", "bwd fused", "bwd unfused", "gain", "max rel diff");
  std::printf("# %5s %6s %6s %6s %11s %11s %7s %11s %11s %7s %13s\n", "", "", "", "", "(ms)", "(ms)", "", "(ms)", "(ms)",
              "", "");
  json rows = json::array();
  for (const bc::gelu_row& r : bc::measure_gelu(shapes, types, o.iters, o.warmup)) {
    const double forward_gain = r.forward_unfused_ms / r.forward_fused_ms;
    const double backward_gain = r.backward_unfused_ms / r.backward_fused_ms;
    std::printf("  %5s %6lld %6lld %6lld %11.3f %11.3f %7.3f %11.3f %11.3f %7.3f %13.3g\n", r.type.c_str(),
                static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k),
                r.forward_fused_ms, r.forward_unfused_ms, forward_gain, r.backward_fused_ms, r.backward_unfused_ms,
                backward_gain, r.max_rel_diff);
    rows.push_back({{"type", r.type},
                    {"m", r.m},
                    {"n", r.n},
                    {"k", r.k},
                    {"forward_fused_ms", r.forward_fused_ms},
                    {"forward_unfused_ms", r.forward_unfused_ms},
                    {"forward_gain", forward_gain},
                    {"backward_fused_ms", r.backward_fused_ms},
                    {"backward_unfused_ms", r.backward_unfused_ms},
                    {"backward_gain", backward_gain},
                    {"max_rel_diff", r.max_rel_diff}});
  }
  if (!o.json.empty()) b::write_json(o.json, "cuda_gelu", command, {{"iters", o.iters}, {"warmup", o.warmup}}, rows);
  return 0;
}

int run_kernels(std::int64_t elements, std::int64_t row_length, const common_options& o, const std::string& command) {
  std::printf("# tpx-bench-cuda kernels: effective bandwidth vs device memcpy, rows of %lld\n",
              static_cast<long long>(row_length));
  std::printf("# %-36s %12s %10s %9s %9s %6s\n", "kernel", "elements", "time(us)", "GB/s", "memcpy", "ratio");
  json rows = json::array();
  for (const bc::bandwidth_row& r : bc::measure_kernels(elements, row_length, o.iters, o.warmup)) {
    std::printf("  %-36s %12lld %10.1f %9.1f %9.1f %6.3f\n", r.kernel.c_str(), static_cast<long long>(r.elements),
                r.microseconds, r.gbps, r.memcpy_gbps, r.ratio);
    rows.push_back({{"kernel", r.kernel}, {"elements", r.elements}, {"bytes", r.bytes}, {"time_us", r.microseconds},
                    {"gbps", r.gbps}, {"memcpy_gbps", r.memcpy_gbps}, {"ratio", r.ratio}});
  }
  if (!o.json.empty())
    b::write_json(o.json, "cuda_kernels", command, {{"iters", o.iters}, {"row_length", row_length}}, rows);
  return 0;
}

// "whole", or "r of X" for rank r's block of queries under context parallelism.
std::string queries_of(const bc::attention_row& r) {
  return r.ranks == 1 ? "whole" : std::to_string(r.rank) + " of " + std::to_string(r.ranks);
}

// The attention rows' table and JSON (attention, attention-tilings: the tiling column when the
// rows have one; the queries column when some row is a block of queries).
void report_attention(const std::vector<bc::attention_row>& measured, const attention_shape& shape,
                      const char* bench, const common_options& o, const std::string& command) {
  const bool tilings = !measured.empty() && !measured.front().tiling.empty();
  const bool blocks = shape.context_parallel > 1;
  std::printf("# tpx-bench-cuda %s: fused causal, %lld x %lld heads of E, %s, scale 1/sqrt(E)\n",
              bench, static_cast<long long>(shape.batch), static_cast<long long>(shape.heads),
              shape.described().c_str());
  std::printf("# TFLOP/s as FlashAttention counts: forward 4 B H T^2 E / 2, backward 2.5x that\n");
  if (blocks)
    std::printf("# queries \"r of X\": rank r's T / X from position r T / X against the T keys, "
                "4 B H E (T / X) (r T / X + T / 2X) FLOPs forward\n");
  std::printf("# %5s %4s %6s %11s %12s %11s %12s %13s%s%s\n", "type", "E", "T", "fwd(ms)",
              "fwd TFLOP/s", "bwd(ms)", "bwd TFLOP/s", "max rel diff", blocks ? "  queries" : "",
              tilings ? "  tiling" : "");
  json rows = json::array();
  for (const bc::attention_row& r : measured) {
    std::printf("  %5s %4lld %6lld %11.3f %12.1f %11.3f %12.1f %13.3g%s%s%s%s\n", r.type.c_str(),
                static_cast<long long>(r.e), static_cast<long long>(r.t_len), r.forward_ms,
                r.forward_tflops, r.backward_ms, r.backward_tflops, r.max_rel_diff,
                blocks ? "  " : "", blocks ? queries_of(r).c_str() : "", tilings ? "  " : "",
                r.tiling.c_str());
    json row = {{"type", r.type},
                {"batch", r.batch},
                {"heads", r.heads},
                {"kv_heads", r.kv_heads},
                {"t", r.t_len},
                {"rank", r.rank},
                {"ranks", r.ranks},
                {"e", r.e},
                {"forward_ms", r.forward_ms},
                {"forward_tflops", r.forward_tflops},
                {"backward_ms", r.backward_ms},
                {"backward_tflops", r.backward_tflops},
                {"max_rel_diff", r.max_rel_diff}};
    if (tilings) row["tiling"] = r.tiling;
    rows.push_back(row);
  }
  if (!o.json.empty())
    b::write_json(o.json, std::string("cuda_") + (tilings ? "attention_tilings" : "attention"),
                  command,
                  {{"iters", o.iters},
                   {"warmup", o.warmup},
                   {"batch", shape.batch},
                   {"heads", shape.heads},
                   {"kv_heads", shape.key_heads()},
                   {"layout", shape.layout},
                   {"context_parallel", shape.context_parallel}},
                  rows);
}

// The kernels' bf16 results are within a few bf16 ulps of the host twin's (the outputs'
// rounding, and the tensor-core kernels' P and dS rounded to bf16 for their second product: 0.005
// on an H200; fp32 rows differ by rounding alone): a row four times further off computes
// something else. Prints each such row; returns how many there are.
int rows_off_the_host_twin(const std::vector<bc::attention_row>& rows) {
  constexpr double tolerance = 0.02;
  int off = 0;
  for (const bc::attention_row& r : rows)
    if (!(r.max_rel_diff <= tolerance)) {
      std::printf("FAILED: %s E=%lld T=%lld, queries %s%s%s: max rel diff %.3g from the host "
                  "twin (at most %.3g)\n",
                  r.type.c_str(), static_cast<long long>(r.e), static_cast<long long>(r.t_len),
                  queries_of(r).c_str(), r.tiling.empty() ? "" : ", ", r.tiling.c_str(),
                  r.max_rel_diff, tolerance);
      ++off;
    }
  return off;
}

int run_attention(const attention_shape& shape, int e, const std::vector<std::string>& types,
                  const common_options& o, const std::string& command) {
  const std::vector<bc::attention_row> rows =
      bc::measure_attention(shape.batch, shape.heads, shape.key_heads(), shape.lengths, e, types,
                            shape.tokens(), shape.context_parallel, o.iters, o.warmup);
  report_attention(rows, shape, "attention", o, command);
  return rows_off_the_host_twin(rows) > 0 ? 1 : 0;
}

int run_attention_tilings(const attention_shape& shape, const std::vector<int>& widths,
                          const common_options& o, const std::string& command) {
  std::vector<bc::attention_row> rows;
  for (int e : widths)
    for (bc::attention_row& r : bc::measure_attention_tilings(
             shape.batch, shape.heads, shape.lengths, e, shape.tokens(), o.iters, o.warmup))
      rows.push_back(std::move(r));
  report_attention(rows, shape, "attention-tilings", o, command);
  return rows_off_the_host_twin(rows) > 0 ? 1 : 0;
}

int run_collectives(bool nccl, int ranks, const std::vector<std::int64_t>& sizes, const std::vector<std::string>& ops,
                    bool check, const common_options& o, const std::string& command) {
  std::printf("# tpx-bench-cuda collectives: %d ranks, %s, float, -n %d -w %d -c %d\n", ranks,
              nccl ? "NCCL (one GPU per rank)" : "simulated mesh (one GPU)", o.iters, o.warmup, check ? 1 : 0);
  json rows = json::array();
  std::string current;
  std::int64_t wrong = 0;
  bc::measure_collectives(nccl ? bc::mesh_kind::nccl : bc::mesh_kind::simulated, ranks, sizes, ops, o.iters, o.warmup,
                          check, [&](const bc::collective_row& r) {
                            if (r.op != current) {
                              current = r.op;
                              std::printf("#\n# %s\n#\n# %55s %35s\n", r.op.c_str(), "out-of-place", "in-place");
                              std::printf("# %10s %12s %6s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count",
                                          "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                                          "busbw", "#wrong");
                              std::printf("# %10s %12s %6s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)",
                                          "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                                          "(GB/s)", "");
                            }
                            std::printf("  %10lld %12lld %6s %6s %6d %9.1f %7.2f %7.2f %6lld ",
                                        static_cast<long long>(r.bytes), static_cast<long long>(r.count), "float",
                                        r.redop.c_str(), r.root, r.oop_us, r.oop_algbw, r.oop_busbw,
                                        static_cast<long long>(r.oop_wrong));
                            if (r.has_in_place)
                              std::printf("%9.1f %7.2f %7.2f %6lld\n", r.ip_us, r.ip_algbw, r.ip_busbw,
                                          static_cast<long long>(r.ip_wrong));
                            else
                              std::printf("%9s %7s %7s %6s\n", "N/A", "N/A", "N/A", "N/A");
                            std::fflush(stdout);
                            wrong += r.oop_wrong + r.ip_wrong;
                            json row = {{"op", r.op},         {"ranks", r.ranks},        {"size", r.bytes},
                                        {"count", r.count},   {"type", "float"},         {"redop", r.redop},
                                        {"root", r.root},     {"oop_time_us", r.oop_us}, {"oop_algbw", r.oop_algbw},
                                        {"oop_busbw", r.oop_busbw}, {"oop_wrong", r.oop_wrong}};
                            if (r.has_in_place) {
                              row["ip_time_us"] = r.ip_us;
                              row["ip_algbw"] = r.ip_algbw;
                              row["ip_busbw"] = r.ip_busbw;
                              row["ip_wrong"] = r.ip_wrong;
                            }
                            rows.push_back(std::move(row));
                          });
  std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED");
  if (!o.json.empty())
    b::write_json(o.json, nccl ? "cuda_collectives_nccl" : "cuda_collectives_simulated", command,
                  {{"ranks", ranks}, {"iters", o.iters}, {"warmup", o.warmup}, {"check", check}}, rows);
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tpx-bench-cuda: tpx's GEMM, kernels, attention and collectives on NVIDIA GPUs"};
  app.require_subcommand(1);

  common_options gemm_o;
  std::string gemm_min = "1024", gemm_max = "8192";
  std::vector<std::string> types = {"fp32", "tf32", "bf16", "fp16"};
  CLI::App* gemm = app.add_subcommand("gemm", "tpx's GEMM vs cuBLASLt directly, TFLOP/s");
  gemm->add_option("-b,--min", gemm_min, "smallest m = n = k");
  gemm->add_option("-e,--max", gemm_max, "largest m = n = k (doubling)");
  gemm->add_option("-t,--types", types, "fp32, tf32, bf16, fp16")->delimiter(',');
  add_common(*gemm, gemm_o);

  common_options gelu_o;
  std::vector<std::string> gelu_shapes = {"16384x3072x768", "8192x4096x1024"};
  std::vector<std::string> gelu_types = {"bf16", "fp32"};
  CLI::App* gelu = app.add_subcommand("gelu", "the MLP's GEMM with GELU fused into cuBLASLt's epilogue vs unfused, ms");
  gelu->add_option("-s,--shapes", gelu_shapes,
                   "MxNxK: rows, F and D (default: GPT-2 124M's up projection, 16 x 1024 tokens, and the MLP peer's)")
      ->delimiter(',');
  gelu->add_option("-t,--types", gelu_types, "bf16, fp32")->delimiter(',');
  add_common(*gelu, gelu_o);

  common_options kernels_o;
  std::string elements = "64M";
  std::int64_t row_length = 4096;
  CLI::App* kernels = app.add_subcommand("kernels", "kernel bandwidth vs device memcpy");
  kernels->add_option("-N,--elements", elements, "elements per array (K/M/G suffixes)");
  kernels->add_option("-d,--row-length", row_length, "row length of the norms and softmax")->check(CLI::Range(1, 1 << 24));
  add_common(*kernels, kernels_o);

  common_options attention_o;
  attention_shape attention_s;
  int head_width = 64;
  std::vector<std::string> attention_types = {"bf16", "fp32"};
  CLI::App* attention = app.add_subcommand(
      "attention", "fused causal attention forward and backward, ms and TFLOP/s");
  add_attention_shape(*attention, attention_s);
  attention->add_option("-E,--head-dim", head_width, "head width E")->check(CLI::Range(1, 1 << 20));
  attention->add_option("-t,--types", attention_types, "bf16, fp32")->delimiter(',');
  attention
      ->add_option("-X,--context-parallel", attention_s.context_parallel,
                   "also time each of X ranks' block of T / X queries against the T keys")
      ->check(CLI::Range(1, 1 << 16));
  attention
      ->add_option("-G,--kv-heads", attention_s.kv_heads,
                   "key and value heads, dividing -H: grouped-query attention (default: -H)")
      ->check(CLI::Range(1, 1 << 20));
  add_common(*attention, attention_o);

  common_options tilings_o;
  attention_shape tilings_s;
  std::vector<int> tilings_widths = {64};
  CLI::App* tilings = app.add_subcommand(
      "attention-tilings", "the tensor-core attention kernels under other tilings, bf16");
  add_attention_shape(*tilings, tilings_s);
  tilings->add_option("-E,--head-dims", tilings_widths, "head widths E: 64, 128 or both")
      ->delimiter(',')
      ->check(CLI::IsMember({64, 128}));
  add_common(*tilings, tilings_o);

  common_options coll_o;
  bool nccl = false, check = true;
  int ranks = 4;
  std::string coll_min = "1K", coll_max = "256M";
  std::vector<std::string> ops = {"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"};
  CLI::App* coll = app.add_subcommand("collectives", "nccl-tests' sweep on the simulated mesh or NCCL");
  coll->add_flag("--nccl", nccl, "one GPU per rank over NCCL (default: the simulated mesh on GPU 0)");
  coll->add_option("-g,--ranks", ranks, "ranks")->check(CLI::Range(1, 64));
  coll->add_option("-b,--minbytes", coll_min, "smallest size S");
  coll->add_option("-e,--maxbytes", coll_max, "largest size S (doubling)");
  coll->add_option("-o,--op", ops, "collectives to run (default: all)")->delimiter(',');
  coll->add_option("-c,--check", check, "check every result (1) or not (0)");
  add_common(*coll, coll_o);

  CLI11_PARSE(app, argc, argv);

  const tpx::cuda::device_census devices = tpx::cuda::find_devices();
  if (devices.count == 0) {
    std::printf("skipped: no CUDA device (%s)\n", devices.reason.c_str());
    return skipped;
  }
  if (nccl && devices.count < ranks) {
    std::printf("skipped: --nccl with %d ranks needs %d CUDA devices, found %d\n", ranks, ranks, devices.count);
    return skipped;
  }
  const std::string command = b::command_line(argc, argv);
  try {
    if (*gemm) {
      std::vector<std::int64_t> sizes;
      for (std::int64_t s = b::parse_bytes(gemm_min); s <= b::parse_bytes(gemm_max); s *= 2) sizes.push_back(s);
      return run_gemm(sizes, types, gemm_o, command);
    }
    if (*gelu) return run_gelu(gelu_shapes, gelu_types, gelu_o, command);
    if (*kernels) return run_kernels(b::parse_bytes(elements), row_length, kernels_o, command);
    if (*attention)
      return run_attention(attention_s, head_width, attention_types, attention_o, command);
    if (*tilings) return run_attention_tilings(tilings_s, tilings_widths, tilings_o, command);
    return run_collectives(nccl, ranks, b::size_sweep(b::parse_bytes(coll_min), b::parse_bytes(coll_max), 2), ops,
                           check, coll_o, command);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpx-bench-cuda: %s\n", e.what());
    return 2;
  }
}

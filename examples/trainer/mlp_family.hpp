// The MLP language model (model.hpp) as a model family of the shared training loop
// (training.hpp) and command line (cli.hpp): tpx-train's model.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model.hpp"
#include "model_family.hpp"

namespace trainer {

struct mlp {
  using config = trainer::config;
  using mesh = tpx::Mesh<X, Y>;
  template <class Space>
  using tensors = model_tensors<Space>;
  template <class Tc, class Space>
  using network = model<Tc, Space>;
  static constexpr const char* about = "a byte-level MLP language model";
  static constexpr const char* overlap_help =
      "on: all-gather each block's weights one block ahead and reduce-scatter its gradients on "
      "each rank's communication thread while it computes (FSDP's prefetch); off: each weight "
      "where it is used, on the rank's own thread (the same results, bit for bit)";
  static constexpr const char* help_footer =
      "Pipeline stages (tpx-train only): --pipeline P cuts the model into P stages over a mesh of "
      "P x X x Y ranks; tpx-train --pipeline 2 --help lists its flags (--microbatches, "
      "--schedule).";

  template <class Space>
  static void initialize(tensors<Space>& p, const config& c) {
    trainer::initialize(p, c);
  }
  template <class Space>
  static auto load_batch(const tpx::rank_context& rank, const text_data& data, const config& c,
                         std::int64_t step) {
    return trainer::load_batch<Space>(rank, data, c, step);
  }
  static int context(const config& c) { return c.context; }
  static nlohmann::json shape(const config& c) {
    return {{"batch", c.batch},   {"d_model", c.d_model}, {"ffn", c.ffn},
            {"layers", c.layers}, {"context", c.context}, {"seed", c.seed}};
  }
  // One prediction (the byte after the context) per row.
  static double tokens_per_step(const config& c) { return static_cast<double>(c.batch); }
  static double flops_per_step(const config& c) { return model<float>::flops_for(c); }
  // The ranks of the mesh that c leaves without a row of the batch (split over X), in a sentence.
  static std::string idle_ranks(const config& c, int, int x, int) {
    return ranks_without_rows(c.batch, x, "X", "--batch " + std::to_string(c.batch));
  }
  // The sizes, which a pipeline's description starts with too.
  static std::string sizes(const config& c) {
    return "batch " + std::to_string(c.batch) + ", D=" + std::to_string(c.d_model) +
           ", F=" + std::to_string(c.ffn) + ", " + std::to_string(c.layers) + " layers";
  }
  static std::string describe(const config& c) {
    return sizes(c) + (c.overlap ? ", FSDP collectives in the background" : "");
  }
  static std::vector<size_flag> size_flags(config& c) {
    return {{"--d-model", &c.d_model, "model width D"},
            {"--ffn", &c.ffn, "MLP width F"},
            {"--layers", &c.layers, "residual MLP blocks"},
            {"--context", &c.context, "input bytes per prediction"}};
  }
};

}  // namespace trainer

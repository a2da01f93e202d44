// The MLP language model cut into pipeline stages (pipelined_model.hpp) as a model family of the
// shared training loop (training.hpp) and command line (cli.hpp): tpx-train --pipeline P. Its
// mesh is P x X x Y: P stages (--pipeline), each an FSDP x TP mesh of --mesh XxY; a step runs
// the batch as --microbatches M in the order --schedule names. Its checkpoints hold the model's
// layers under the names tpx-train without --pipeline gives them, so a run resumes on any stage
// count and schedule, or without stages, and a run without stages resumes on stages.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlp_family.hpp"
#include "model_family.hpp"
#include "pipelined_model.hpp"

namespace trainer {

struct pipelined_mlp {
  using config = pipeline_config;
  using mesh = tpx::Mesh<P, X, Y>;
  static constexpr bool pipelined = true;  // axis P's size is config::stages (training.hpp)
  template <class Space>
  using tensors = pipelined_tensors<Space>;
  template <class Tc, class Space>
  using network = pipelined_model<Tc, Space>;
  static constexpr const char* about =
      "a byte-level MLP language model, cut into pipeline stages over mesh axis P,";
  static constexpr const char* overlap_help =
      "on: each tick's passes of activations and their gradients between stages run on each "
      "rank's communication thread while it computes, and the stages no longer meet at every "
      "tick (nn::run_pipeline's in_background); so do FSDP's once-per-step gathers, each "
      "block's ahead of the first pass that uses it, and reduce-scatters, each block's behind "
      "the rest of the last backward pass; off: all on the rank's own thread (the same results, "
      "bit for bit)";

  template <class Space>
  static void initialize(tensors<Space>& p, const config& c) {
    trainer::initialize(p, c, schedule_of(c));
  }
  template <class Space>
  static pipeline_batch<Space> load_batch(const tpx::rank_context& rank, const text_data& data,
                                          const config& c, std::int64_t step) {
    return load_microbatches<Space>(rank, data, c, step, c.microbatches);
  }
  static int context(const config& c) { return c.context; }
  // The model's: checkpoints hold its layers as the model without stages does
  // (pipelined_tensors::for_each_layer), whatever the stages and schedule.
  static nlohmann::json shape(const config& c) { return mlp::shape(c); }
  static double tokens_per_step(const config& c) { return mlp::tokens_per_step(c); }
  static double flops_per_step(const config& c) { return mlp::flops_per_step(c); }
  static std::string describe(const config& c) {
    return mlp::sizes(c) + ", " + std::to_string(c.stages) + " pipeline stages (" + c.schedule +
           ", " + std::to_string(c.microbatches) + " microbatches" +
           (c.fsdp_per_pass ? ", FSDP collectives in every pass" : "") +
           (!c.overlap        ? ")"
            : c.fsdp_per_pass ? ", passes in the background)"
                              : ", passes and FSDP collectives in the background)");
  }
  // The pipeline's settings and its schedule's bubble, the share of a step each stage idles
  // (pipeline_schedule::bubble): --dry-run reports them, and tpx-plan counts the bubble in the
  // step's compute time.
  static nlohmann::json pipeline(const config& c) {
    return {{"stages", c.stages},
            {"microbatches", c.microbatches},
            {"schedule", c.schedule},
            {"bubble", schedule_of(c).bubble()}};
  }
  static std::vector<size_flag> size_flags(config& c) {
    std::vector<size_flag> flags = mlp::size_flags(c);
    flags.push_back({"--pipeline", &c.stages, "pipeline stages P (mesh axis P: P x X x Y ranks)"});
    flags.push_back(
        {"--microbatches", &c.microbatches, "microbatches M a step's batch is cut into"});
    return flags;
  }
  static std::vector<switch_flag> switch_flags(config& c) {
    return {{"--fsdp-per-pass", &c.fsdp_per_pass,
             "run FSDP's collectives over X in every pass of every microbatch, not once per step: "
             "all-gather each block's weights in each pass and reduce-scatter each microbatch's "
             "gradients, holding neither the stage's gathered weights nor its unreduced "
             "gradients through the step, for 2M times the gathers and M times the "
             "reduce-scatters"}};
  }
  static std::vector<choice_flag> choice_flags(config& c) {
    std::vector<std::string> names;
    for (const auto& named : schedule_orders()) names.push_back(named.first);
    return {{"--schedule", &c.schedule,
             "the order of the microbatches' passes (interleaved: two chunks of layers per "
             "stage; zero-bubble and zero-bubble-v: weight gradients apart from input ones)",
             names}};
  }
  // The ranks of a stage that c leaves without a row of a microbatch (split over X), in a
  // sentence.
  static std::string idle_ranks(const config& c, int, int x, int) {
    const std::int64_t rows = c.batch / c.microbatches;
    return ranks_without_rows(rows, x, "X",
                              "--batch " + std::to_string(c.batch) + " in --microbatches " +
                                  std::to_string(c.microbatches) + " of " + std::to_string(rows));
  }
  // What the stages, microbatches, layers and batch cannot make, as the sentence for the user.
  static std::string unsupported(const config& c) {
    try {
      const tpx::nn::pipeline_schedule plan = schedule_of(c);
      blocks_per_piece(c, plan.pieces());
    } catch (const std::invalid_argument& e) {
      const std::string why = e.what();  // "trainer: ..." or "tpx: ...": the program names itself
      return why.substr(why.find(": ") + 2);
    }
    if (c.batch % c.microbatches != 0)
      return "--batch " + std::to_string(c.batch) + " does not cut into --microbatches " +
             std::to_string(c.microbatches) + " of equal size";
    return "";
  }
};

}  // namespace trainer

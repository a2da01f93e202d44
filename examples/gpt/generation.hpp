// Text generation with a trained GPT (tpx-gpt --generate): the bytes the model writes after a
// prompt, one at a time, each sampled (sampling.hpp) from the model's prediction for the position
// after the bytes before it. Each byte runs the model's forward pass over the last --seq bytes
// (the learned position table has --seq rows: nanoGPT's crop to block_size) as a batch of one row,
// padded with zero bytes after them, which the causal mask keeps from every position before them;
// nothing is cached between bytes, so a byte costs a forward pass of T positions, which a model
// small enough to train on this machine does in milliseconds. It runs on one rank in fp32
// (generate_from_checkpoint reads a checkpoint onto it), with the transformer the trainer trains:
// the logits are transformer::logits, forward_backward's passes up to the head.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tpx/kernels/random.hpp>
#include <vector>

#include "model.hpp"
#include "sampling.hpp"

namespace gpt {

struct sampling_options {
  double temperature = 0.8;  // 0: the most likely byte every time
  std::uint64_t seed = 1;    // the draws' seed: byte i draws tpx::kernels::uniform_at(seed, i)
};

// The config of one generated row: c's model (its sizes, MLP and positions), a batch of one row,
// the layout of one rank with the reference attention.
inline config generation_config(config c) {
  c.batch = 1;
  c.checkpoint_every = 0;
  c.overlap = false;
  c.fused_attention = false;
  c.plain_tensor_parallel = false;
  c.context_parallel = false;
  c.load_balance = false;
  return c;
}

// Refuses an empty prompt: each byte is predicted from the bytes before it.
inline void require_prompt(std::string_view prompt) {
  if (prompt.empty())
    throw std::invalid_argument(
        "gpt: generation needs a prompt of at least one byte: each byte is predicted from the "
        "bytes before it");
}

// Writes `count` bytes after `prompt` (at least one byte) with the model of `params` and config c,
// calling on_byte with each as it comes; returns them.
inline std::string generate(const tpx::rank_context& rank,
                            const model_tensors<tpx::host_space>& params, const config& model,
                            std::string_view prompt, int count, const sampling_options& s,
                            const std::function<void(char)>& on_byte = {}) {
  require_prompt(prompt);
  const config c = generation_config(model);
  const transformer<float, tpx::host_space, layout::sequence_parallel> net(rank, c);
  std::string text(prompt);
  const auto seq = static_cast<std::size_t>(c.seq);
  for (int i = 0; i < count; ++i) {
    const std::string_view window =
        std::string_view(text).substr(text.size() > seq ? text.size() - seq : 0);
    const auto tokens = batch_of<tpx::host_space>(rank, c, [&](std::int64_t e) -> std::int32_t {
      const auto t = static_cast<std::size_t>(e / columns);
      if (e % columns == position) return static_cast<std::int32_t>(t);
      if (e % columns == input_byte && t < window.size())
        return static_cast<unsigned char>(window[t]);
      return 0;  // the padding after the window, and every target: never read
    });
    const std::vector<float> logits = tpx::to_global(net.logits(params, tokens));  // [1, T, V]
    const auto vocab = static_cast<std::size_t>(c.vocab);
    const std::span<const float> last(logits.data() + (window.size() - 1) * vocab, vocab);
    const char byte = static_cast<char>(sample_byte(
        last, s.temperature, tpx::kernels::uniform_at(s.seed, static_cast<std::uint64_t>(i))));
    text.push_back(byte);
    if (on_byte) on_byte(byte);
  }
  return text.substr(prompt.size());
}

// What generate_from_checkpoint wrote, and with which checkpoint's model.
struct generated {
  std::int64_t step = 0;  // the checkpoint's
  config model;           // its model (family::config_of)
  std::string text;       // the bytes written after the prompt
};

// generate() with the model of the newest valid checkpoint in `dir` (warnings about damaged ones
// skipped on stderr), its sizes read from the checkpoint, on one host rank. Compiled in
// generate.cpp.
generated generate_from_checkpoint(const std::string& dir, std::string_view prompt, int count,
                                   const sampling_options& s,
                                   const std::function<void(char)>& on_byte = {});

}  // namespace gpt

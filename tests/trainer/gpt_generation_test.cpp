// Text generation with the GPT example (examples/gpt/generation.hpp, tpx-gpt --generate):
//   - the logits generation reads (transformer::logits, forward only) are those the trained loss
//     is computed from: their mean cross-entropy, computed here in double by a naive loop, is
//     forward_backward's loss (1e-5 relative), for GPT-2's block and for Llama's (RMSNorm, RoPE,
//     SwiGLU, grouped queries);
//   - sample_byte draws from softmax(logits / T): fed the N evenly spaced uniforms (k + 1/2) / N,
//     an inverse-CDF draw picks each byte within one draw of N times its probability, computed
//     here independently; at temperature 0 the first largest logit; never a column past the 256
//     bytes;
//   - family::config_of reads back the shape a checkpoint records, a key saved before it was
//     recorded as the default config's (trainer::recorded_shape), and refuses one it cannot;
//   - end to end: a model trained on 2x1 until it has learned a text that repeats the alphabet,
//     read from its checkpoint onto one rank, continues a prompt greedily with exactly the text's
//     next bytes, and the same seed draws the same bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../examples/gpt/generation.hpp"
#include "../support/run_command.hpp"
#include "gpt_test_support.hpp"

namespace {

// The mean over the batch's positions of -log softmax(logits)[target], in double.
double mean_cross_entropy(const std::vector<float>& logits, const std::vector<std::int32_t>& tokens,
                          std::int64_t vocab) {
  const std::size_t positions = tokens.size() / gpt::columns;
  double total = 0;
  for (std::size_t i = 0; i < positions; ++i) {
    const float* row = logits.data() + i * static_cast<std::size_t>(vocab);
    const double most = *std::max_element(row, row + vocab);
    double sum = 0;
    for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - most);
    const std::int32_t target = tokens[i * gpt::columns + gpt::target_byte];
    total += most + std::log(sum) - row[target];
  }
  return total / static_cast<double>(positions);
}

// The tiny model with Llama's block: rotary positions, SwiGLU, `heads` query heads over 2 key
// heads.
gpt::config tiny_llama(std::int64_t heads) {
  gpt::config c = gpt_test::tiny();
  c.heads = heads;
  c.kv_heads = 2;
  c.rope = true;
  c.swiglu = true;
  return c;
}

}  // namespace

TEST_CASE("generation's logits give the loss the model trains on") {
  for (const gpt::config& c : {gpt_test::tiny(), tiny_llama(4)}) {
    INFO("rope " << c.rope << ", swiglu " << c.swiglu << ", key heads " << c.key_heads());
    const trainer::text_data data(gpt_test::text, static_cast<int>(c.seq));
    tpx::spmd(tpx::host, gpt::mesh{1, 1, 1}, [&](auto& rank) {
      gpt::model_tensors params(rank, c), grads(rank, c);
      gpt::initialize(params, c);
      const auto tokens = gpt::load_batch<tpx::host_space>(rank, data, c, 3);
      const float loss =
          tpx::scalar_on_host(gpt::model<float>(rank, c).forward_backward(params, tokens, grads));
      const gpt::transformer<float, tpx::host_space, gpt::layout::sequence_parallel> net(rank, c);
      const std::vector<float> logits = tpx::to_global(net.logits(params, tokens));
      REQUIRE(logits.size() == static_cast<std::size_t>(c.batch * c.seq * c.vocab));
      const std::span<const std::int32_t> whole_batch = tokens.rows->sublayer.elements();  // 1 rank
      const double want = mean_cross_entropy(
          logits, std::vector<std::int32_t>(whole_batch.begin(), whole_batch.end()), c.vocab);
      CHECK(std::abs(loss - want) <= 1e-5 * want);
    });
  }
}

TEST_CASE("sample_byte draws each byte as often as softmax(logits / T) says") {
  std::vector<float> logits(300);
  for (std::size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)) * 3);
  logits[280] = 100;  // past the bytes: never drawn, never the maximum
  for (const double temperature : {1.0, 0.5, 2.0}) {
    INFO("temperature " << temperature);
    std::vector<double> p(256);
    double total = 0;
    for (std::size_t i = 0; i < p.size(); ++i) total += p[i] = std::exp(logits[i] / temperature);
    const int draws = 100000;
    std::vector<int> count(256);
    for (int k = 0; k < draws; ++k) {
      const int b = gpt::sample_byte(logits, temperature, (k + 0.5) / draws);
      REQUIRE(b >= 0);
      REQUIRE(b < 256);
      ++count[b];
    }
    for (std::size_t i = 0; i < p.size(); ++i) {
      INFO("byte " << i);
      CHECK(std::abs(count[i] - draws * p[i] / total) <= 1.0 + 1e-6 * draws);
    }
  }
  const std::size_t first_largest = static_cast<std::size_t>(
      std::max_element(logits.begin(), logits.begin() + 256) - logits.begin());
  logits[first_largest + 1] = logits[first_largest];  // a tie: the first wins
  for (const double u : {0.0, 0.5, 0.999})
    CHECK(gpt::sample_byte(logits, 0, u) == static_cast<int>(first_largest));
  CHECK_THROWS_AS(gpt::sample_byte(logits, -1, 0.5), std::invalid_argument);
  CHECK_THROWS_AS(gpt::sample_byte(logits, std::nan(""), 0.5), std::invalid_argument);
}

TEST_CASE("config_of reads back the shape a checkpoint records") {
  gpt::config llama = tiny_llama(6);
  llama.seed = 7;
  for (const gpt::config& c : {gpt::config{}, gpt_test::tiny(), llama}) {
    const nlohmann::json shape = gpt::family::shape(c);
    CHECK(gpt::family::shape(gpt::family::config_of(shape, "ck")) == shape);
  }
  nlohmann::json before_groups = gpt::family::shape(gpt_test::tiny());
  before_groups.erase("query_group");  // saved before it was recorded: multi-head attention
  CHECK(gpt::family::config_of(trainer::recorded_shape<gpt::family>(before_groups), "ck")
            .key_heads() == gpt_test::tiny().heads);
  nlohmann::json bad = gpt::family::shape(gpt_test::tiny());
  bad["mlp"] = "relu";
  CHECK_THROWS_WITH_AS(gpt::family::config_of(bad, "ck"), doctest::Contains("mlp is \"relu\""),
                       std::runtime_error);
  bad = gpt::family::shape(gpt_test::tiny());
  bad["query_group"] = 2;  // 3 heads
  CHECK_THROWS_WITH_AS(gpt::family::config_of(bad, "ck"), doctest::Contains("query_group 2"),
                       std::runtime_error);
  bad = gpt::family::shape(gpt_test::tiny());
  bad["layers"] = 0;
  CHECK_THROWS_WITH_AS(gpt::family::config_of(bad, "ck"), doctest::Contains("layers is 0"),
                       std::runtime_error);
}

TEST_CASE("a model that learned a text continues a prompt with the text's next bytes") {
  const std::filesystem::path dir = scratch_folder("gpt-generation-test", "alphabet");
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz\n";
  {
    std::ofstream text(dir / "alphabet.txt");
    for (int i = 0; i < 200; ++i) text << alphabet;
  }
  trainer::run_options<gpt::family> o;
  o.model = gpt_test::tiny();
  o.model.layers = 1;
  o.mesh_x = 2;
  o.mesh_y = 1;
  o.steps = 150;
  o.lr = 1e-2f;
  o.text = (dir / "alphabet.txt").string();
  o.ckpt_dir = (dir / "ck").string();
  float last_loss = 0;
  trainer::run(o, [&](const trainer::step_report& r) { last_loss = r.loss; });
  REQUIRE(last_loss < 0.05f);  // learned: each byte's successor is certain

  std::string written;
  const gpt::generated greedy = gpt::generate_from_checkpoint(
      o.ckpt_dir, "xyz\nab", 60, {0.0, 1}, [&](char b) { written.push_back(b); });
  std::string want;
  for (std::size_t i = 0; want.size() < 60; ++i)
    want.push_back(alphabet[(2 + i) % alphabet.size()]);
  CHECK(greedy.text == want);
  CHECK(written == greedy.text);
  CHECK(greedy.step == o.steps);
  CHECK(gpt::family::shape(greedy.model) == gpt::family::shape(o.model));

  const auto drawn = [&](std::uint64_t seed) {
    return gpt::generate_from_checkpoint(o.ckpt_dir, "abc", 40, {0.8, seed}).text;
  };
  CHECK(drawn(5) == drawn(5));
  CHECK_THROWS_WITH_AS(gpt::generate_from_checkpoint(o.ckpt_dir, "", 5, {}),
                       doctest::Contains("a prompt of at least one byte"), std::invalid_argument);
}

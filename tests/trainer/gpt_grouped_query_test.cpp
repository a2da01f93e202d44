// The GPT example with grouped-query attention (config::kv_heads, tpx-gpt --kv-heads: H key and
// value heads split over Y, each serving G = heads / H query heads; Wq [D, H_Y, G, E], Wk and Wv
// [D, H_Y, E]):
//  - its loss and every gradient equal the 1x1 run's on 2x2, 4x1, 1x4 (2 key heads over 4 ranks
//    of Y: two hold none), 2x1x2 and 3x2, and without sequence parallelism and with the fused
//    kernels on 2x2; one key head for all 6 query heads on 1x2; Llama's block (rotary positions,
//    SwiGLU, fused attention) on 2x2, and with load-balanced context parallelism on 2x2 and
//    2x2x2 (tolerances of gpt_checks.hpp: 1e-5 relative for the loss, 1e-4 of each gradient's
//    largest element);
//  - the backward pass is the gradient of the loss by central differences on 1x1 and 2x2;
//  - with G = 1 (--kv-heads equal to --heads) it is the multi-head model, bit for bit;
//  - the model holds as many matrix weights as the FLOP count assumes (family::matrix_weights,
//    counted here from the tensors' sizes);
//  - 30 training steps on 2x2 follow the 1x1 losses, which fall, and a checkpoint of the
//    multi-head model does not resume with grouped queries.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpt_checks.hpp"

namespace {

// 6 query heads of width 2 (D = 12, as tiny()'s), 2 key and value heads: groups of 3.
gpt::config grouped() {
  gpt::config c = gpt_test::tiny();
  c.heads = 6;
  c.head_dim = 2;
  c.kv_heads = 2;
  return c;
}

const int tensors = 2 + 8 * 2 + 2;  // the two tables, 8 per block, the final norm and the head

}  // namespace

TEST_CASE("GPT with grouped queries: every mesh has the 1x1 gradients, which are the loss's") {
  const gpt::config c = grouped();
  const gpt_test::run_result want = gpt_test::gradients({1, 1, 1}, tpx::host, c);
  REQUIRE(want.grads.size() == tensors);
  gpt::config heads = c;
  heads.kv_heads = 0;  // the same width and heads without groups: another model
  CHECK(want.loss != gpt_test::gradients({1, 1, 1}, tpx::host, heads).loss);
  gpt_test::check_meshes_follow(want, c,
                                {gpt::mesh{1, 2, 2}, gpt::mesh{1, 4, 1}, gpt::mesh{1, 1, 4},
                                 gpt::mesh{2, 1, 2}, gpt::mesh{1, 3, 2}});
  gpt::config variant = c;
  variant.plain_tensor_parallel = true;
  variant.fused_attention = true;
  gpt_test::check_meshes_follow(want, variant, {gpt::mesh{1, 2, 2}});

  gpt::config one_key = c;  // multi-query attention: one key head for every query head
  one_key.kv_heads = 1;
  gpt_test::check_meshes_follow(gpt_test::gradients({1, 1, 1}, tpx::host, one_key), one_key,
                                {gpt::mesh{1, 1, 2}});

  // Llama's block: rotary positions, SwiGLU, fused attention; then over blocks of each sequence
  // in the load-balanced order.
  gpt::config llama = c;
  llama.rope = true;
  llama.swiglu = true;
  const gpt_test::run_result llama_want = gpt_test::gradients({1, 1, 1}, tpx::host, llama);
  llama.fused_attention = true;
  gpt_test::check_meshes_follow(llama_want, llama, {gpt::mesh{1, 2, 2}});
  llama.context_parallel = true;
  llama.load_balance = true;
  llama.seq = 8;  // 2 chunks per rank of X = 2
  gpt::config llama_whole = llama;
  llama_whole.context_parallel = llama_whole.load_balance = false;
  gpt_test::check_meshes_follow(gpt_test::gradients({1, 1, 1}, tpx::host, llama_whole), llama,
                                {gpt::mesh{1, 2, 2}, gpt::mesh{2, 2, 2}});
  gpt_test::check_backward_is_the_loss_gradient(c, tensors);
}

TEST_CASE("GPT with one query head per key head is the multi-head model, to the bit") {
  gpt::config c = gpt_test::tiny();
  const gpt_test::run_result heads = gpt_test::gradients({1, 2, 2}, tpx::host, c);
  c.kv_heads = c.heads;
  const auto d = gpt_test::differences(gpt_test::gradients({1, 2, 2}, tpx::host, c), heads, 0, 0);
  CHECK_MESSAGE(d.empty(), gpt_test::joined(d));
}

TEST_CASE("GPT with grouped queries holds the matrix weights its FLOP count assumes") {
  for (const std::int64_t kv_heads : {1, 2, 3, 6}) {
    CAPTURE(kv_heads);
    gpt::config c = grouped();
    c.kv_heads = kv_heads;
    const gpt_test::run_result r = gpt_test::gradients({1, 1, 1}, tpx::host, c);
    double matrices = 0;  // every tensor but the tables and the norms
    for (std::size_t t = 0; t < r.names.size(); ++t) {
      const std::string& name = r.names[t];
      if (name.find("embed") == std::string::npos && name.find("norm") == std::string::npos)
        matrices += static_cast<double>(r.grads[t].size());
      if (name == "block.0.wk") CHECK(r.grads[t].size() == std::size_t(12 * kv_heads * 2));
    }
    CHECK(matrices == gpt::family::matrix_weights(c));
  }
}

TEST_CASE("GPT training with grouped queries on 2x2 follows 1x1; a multi-head checkpoint refused") {
  const auto grouped_queries = [](gpt::config& c) {
    c.heads = 6;
    c.head_dim = 2;
    c.kv_heads = 2;
  };
  gpt_test::check_training_follows_one_rank(grouped_queries);
  const auto regrouped = [](gpt::config& c) { c.kv_heads = 1; };  // tiny()'s 3 heads, 1 key head
  CHECK_THROWS_WITH(gpt_test::losses(gpt_test::default_checkpoint_resumed_as(regrouped, "gqa")),
                    doctest::Contains("has query_group = 1, this run 3"));
}

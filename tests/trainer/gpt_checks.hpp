// Checks the GPT model's tests share (gpt_test.cpp, gpt_grouped_query_test.cpp): every mesh's
// loss and gradients against the 1x1 run's, the backward pass against directional derivatives of
// the loss, 30 training steps on 2x2 against 1x1's, and a checkpoint of the default model
// resumed as another.
#pragma once

#include <doctest/doctest.h>

#include <initializer_list>
#include <vector>

#include "../support/run_command.hpp"  // scratch_folder
#include "directional_check.hpp"
#include "gpt_test_support.hpp"

namespace gpt_test {

// Every mesh's loss and gradients of model c equal want's (1e-5 relative, 1e-4 of each
// gradient's largest element).
inline void check_meshes_follow(const run_result& want, const gpt::config& c,
                                std::initializer_list<gpt::mesh> meshes) {
  for (const gpt::mesh& mesh : meshes) {
    CAPTURE(mesh.to_string());
    const auto d = differences(gradients(mesh, tpx::host, c), want, 1e-5, 1e-4);
    CHECK_MESSAGE(d.empty(), joined(d));
  }
}

// On 1x1 and 2x2, each of model c's `tensors` parameter tensors has the gradient the central
// difference of the loss finds along a random direction (directional_check.hpp).
inline void check_backward_is_the_loss_gradient(const gpt::config& c, int tensors) {
  const trainer::text_data data(text, static_cast<int>(c.seq));
  for (const gpt::mesh& mesh : {gpt::mesh{1, 1, 1}, gpt::mesh{1, 2, 2}}) {
    CAPTURE(mesh.to_string());
    trainer_test::directional_check check;
    tpx::spmd(tpx::host, mesh, [&](auto& rank) {
      gpt::model_tensors params(rank, c), grads(rank, c), scratch(rank, c);
      gpt::initialize(params, c);
      const gpt::model<float> net(rank, c);
      const auto tokens = gpt::load_batch<tpx::host_space>(rank, data, c, 0);
      net.forward_backward(params, tokens, grads);
      check.run(rank, params, grads,
                [&] { return tpx::scalar_on_host(net.forward_backward(params, tokens, scratch)); });
    });
    CHECK(check.checked == tensors);
    for (const auto& m : check.mismatches) FAIL_CHECK(m);
  }
}

// 30 training steps of the model variant(c) makes of tiny()'s on 2x2, checkpointing every block
// and overlapping communication, follow its 1x1 losses (relative 1e-4), which fall.
template <class Variant>
void check_training_follows_one_rank(const Variant& variant) {
  trainer::run_options<gpt::family> one = training(1, 1, 1);
  variant(one.model);
  const std::vector<float> want = losses(one);
  REQUIRE(want.size() == 30);
  CHECK(want.back() < want.front() - 0.5f);
  trainer::run_options<gpt::family> four = training(1, 2, 2, 1);
  variant(four.model);
  four.model.overlap = true;
  const float worst = worst_relative_difference(losses(four), want);
  INFO("worst relative loss difference " << worst);
  CHECK(worst <= 1e-4f);
}

// The options that resume, as the model variant(c) makes, for steps 2-3, the 1x1 run of the
// default model that has saved steps 0-1 in scratch folder `name`.
template <class Variant>
trainer::run_options<gpt::family> default_checkpoint_resumed_as(const Variant& variant,
                                                                const char* name) {
  trainer::run_options<gpt::family> saved = training(1, 1, 1);
  saved.steps = 2;
  saved.ckpt_dir = scratch_folder("tpx-gpt-test", name).string();
  (void)losses(saved);
  trainer::run_options<gpt::family> resumed = saved;
  resumed.steps = 4;
  resumed.resume = true;
  variant(resumed.model);
  return resumed;
}

}  // namespace gpt_test

// The GPT example's parameters (model.hpp's model): every parameter-shaped tensor of the model,
// named as checkpoints name them and sharded as FSDP and tensor parallelism keep them, and their
// initial values, the same on every mesh.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <tpx/kernels/random.hpp>
#include <tpx/tpx.hpp>
#include <vector>

#include "../trainer/tensor_set.hpp"
#include "config.hpp"

namespace gpt {

// Every parameter-shaped tensor of the model, fp32, in memory space Space: the master weights,
// their gradients and the two Adam moments are each one of these. None is split over R: each
// replica holds the same shards (HSDP), written once to a checkpoint (io/checkpoint_writer.hpp).
template <class Space>
struct model_tensors : trainer::tensor_set<model_tensors<Space>> {
  template <class T, class... Spec>
  using Tensor = tpx::BasicTensor<Space, T, Spec...>;
  using table = Tensor<float, V<X>, D<Y>>;
  using norm = Tensor<float, D<Y, X>>;
  // Wq, Wk, Wv: column-parallel by key heads (Wq's G query heads of each with it)
  using query_projection = Tensor<float, D<X>, H<Y>, G<>, E<>>;
  using key_projection = Tensor<float, D<X>, H<Y>, E<>>;

  table token_embed;
  std::optional<Tensor<float, T<X>, D<Y>>> position_embed;  // without config::rope only
  std::vector<norm> norm1, norm2;
  std::vector<query_projection> wq;
  std::vector<key_projection> wk, wv;
  std::vector<Tensor<float, H<Y>, G<>, E<>, D<X>>> wo;  // row-parallel by heads
  std::vector<Tensor<float, D<X>, F<Y>>> w_in;
  std::vector<Tensor<float, D<X>, F<Y>>> w_gate;  // with config::swiglu only: empty otherwise
  std::vector<Tensor<float, F<Y>, D<X>>> w_out;
  norm final_norm;
  Tensor<float, D<X>, V<Y>> head;

  // Zeros of every parameter's shape.
  model_tensors(const tpx::rank_context& rank, const config& c)
      : token_embed(rank, {V(c.vocab), D(c.d_model())}),
        final_norm(rank, {D(c.d_model())}),
        head(rank, {D(c.d_model()), V(c.vocab)}) {
    const std::int64_t d = c.d_model();
    if (!c.rope) position_embed.emplace(rank, tpx::Shape{T(c.seq), D(d)});
    for (int l = 0; l < c.layers; ++l) {
      norm1.emplace_back(rank, tpx::Shape{D(d)});
      norm2.emplace_back(rank, tpx::Shape{D(d)});
      const std::int64_t h = c.key_heads(), g = c.group(), e = c.head_dim;
      wq.emplace_back(rank, tpx::Shape{D(d), H(h), G(g), E(e)});
      for (auto* w : {&wk, &wv}) w->emplace_back(rank, tpx::Shape{D(d), H(h), E(e)});
      wo.emplace_back(rank, tpx::Shape{H(h), G(g), E(e), D(d)});
      w_in.emplace_back(rank, tpx::Shape{D(d), F(c.ffn)});
      if (c.swiglu) w_gate.emplace_back(rank, tpx::Shape{D(d), F(c.ffn)});
      w_out.emplace_back(rank, tpx::Shape{F(c.ffn), D(d)});
    }
  }

  // Every tensor by name, in order (tensor_set::for_each walks it).
  template <class Self, class Fn, class... Others>
  static void visit(Self& self, Fn& f, Others&... others) {
    f(std::string("token_embed"), self.token_embed, others.token_embed...);
    if (self.position_embed)
      f(std::string("position_embed"), *self.position_embed, *others.position_embed...);
    for (std::size_t l = 0; l < self.norm1.size(); ++l) {
      const std::string p = "block." + std::to_string(l) + ".";
      f(p + "norm1", self.norm1[l], others.norm1[l]...);
      f(p + "wq", self.wq[l], others.wq[l]...);
      f(p + "wk", self.wk[l], others.wk[l]...);
      f(p + "wv", self.wv[l], others.wv[l]...);
      f(p + "wo", self.wo[l], others.wo[l]...);
      f(p + "norm2", self.norm2[l], others.norm2[l]...);
      f(p + "w_in", self.w_in[l], others.w_in[l]...);
      if (!self.w_gate.empty()) f(p + "w_gate", self.w_gate[l], others.w_gate[l]...);
      f(p + "w_out", self.w_out[l], others.w_out[l]...);
    }
    f(std::string("final_norm"), self.final_norm, others.final_norm...);
    f(std::string("head"), self.head, others.head...);
  }
};

template <class Rank>
model_tensors(const Rank&, const config&) -> model_tensors<tpx::space_of_t<Rank>>;

// The initial weights, the same on every mesh: N(0, 1/fan_in) for projections, N(0, 1) for the
// embedding tables, ones for norms.
template <class Space>
void initialize(model_tensors<Space>& p, const config& c) {
  std::uint64_t seed = c.seed * 1000;
  auto normal = [&](auto& t, double fan_in) {
    const float scale = static_cast<float>(1.0 / std::sqrt(fan_in));
    const std::uint64_t s = ++seed;
    trainer::fill_staged(t, [&](std::int64_t i) {
      return scale * tpx::kernels::normal_at(s, static_cast<std::uint64_t>(i));
    });
  };
  auto ones = [](auto& t) { trainer::fill_staged(t, [](std::int64_t) { return 1.0f; }); };
  const auto d = static_cast<double>(c.d_model());
  normal(p.token_embed, 1.0);
  if (p.position_embed) normal(*p.position_embed, 1.0);
  for (std::size_t l = 0; l < p.norm1.size(); ++l) {
    ones(p.norm1[l]);
    ones(p.norm2[l]);
    normal(p.wq[l], d);
    for (auto* w : {&p.wk[l], &p.wv[l]}) normal(*w, d);
    normal(p.wo[l], d);
    normal(p.w_in[l], d);
    if (c.swiglu) normal(p.w_gate[l], d);
    normal(p.w_out[l], static_cast<double>(c.ffn));
  }
  ones(p.final_norm);
  normal(p.head, d);
}

}  // namespace gpt

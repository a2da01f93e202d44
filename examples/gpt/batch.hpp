// The GPT example's batches (model.hpp's model reads them): a step's tokens in the layouts of the
// model they are for, loaded from the training text or, for text generation, from any function
// of the position.
//
// Tokens are bytes; a batch is [B, T, W] int32 with three columns per position: the input byte,
// the target byte (the next one) and the position, which indexes PosE through the same embedding
// lookup as the bytes (with rotary embedding, the rotation finds a row's position from its
// index). The model reads them twice: split like the residual stream, [B_RX, T_Y, W], for the
// embeddings, and like a sublayer's input, with the sequence whole, [B_RX, T, W], for the loss
// (plain TP reads the second for both; the batch loads the first all the same, so that its type
// is one); with context parallelism, [B_R, T_XY, W] and [B_R, T_X, W].
#pragma once

#include <cstdint>
#include <optional>
#include <tpx/nn/sequence_order.hpp>
#include <tpx/tensor/staging.hpp>
#include <tpx/tpx.hpp>
#include <type_traits>
#include <utility>

#include "../trainer/tensor_set.hpp"
#include "../trainer/text_data.hpp"
#include "config.hpp"

namespace gpt {

// The columns of a batch's token tensor [B, T, W].
enum token_column : std::int64_t { input_byte = 0, target_byte = 1, position = 2, columns = 3 };

// A step's tokens, twice: split like the residual stream, and like a sublayer's input (the
// sequence gathered over Y). Rows: how the batch dim is split; StreamPositions and Positions:
// how the sequence is, in the stream and in a sublayer.
template <class Space, class Rows, class StreamPositions, class Positions>
struct token_layouts {
  tpx::BasicTensor<Space, std::int32_t, Rows, StreamPositions, W<>> stream;
  tpx::BasicTensor<Space, std::int32_t, Rows, Positions, W<>> sublayer;
};

// A step's batch, in the layouts of the model it is for: data parallel over X (the rows split
// over R and X, each rank's sublayers seeing whole sequences), or context parallel over X
// (config::context_parallel: the rows split over R, each sequence over X, and over Y too in the
// stream). The other is empty.
template <class Space>
struct batch {
  std::optional<token_layouts<Space, B<R, X>, T<Y>, T<>>> rows;
  std::optional<token_layouts<Space, B<R>, T<X, Y>, T<X>>> blocks;
};

// A batch of c's sizes whose int32 element i of [B, T, W] (row-major over the whole batch) is
// token(i), read on the host and copied to Space (trainer::staged_tensor: in a dry run, not
// read), in the layouts of c's model.
template <class Space, class Token>
batch<Space> batch_of(const tpx::rank_context& rank, const config& c, const Token& token) {
  auto load = [&]<class Tn>(Tn* kind) {
    (void)kind;
    return trainer::staged_tensor<Tn>(rank, {B(c.batch), T(c.seq), W(columns)}, token);
  };
  batch<Space> b;
  const auto load_both = [&](auto& layouts) {
    using L = typename std::remove_reference_t<decltype(layouts)>::value_type;
    layouts.emplace(L{load(static_cast<decltype(L::stream)*>(nullptr)),
                      load(static_cast<decltype(L::sublayer)*>(nullptr))});
  };
  if (c.context_parallel)
    load_both(b.blocks);
  else
    load_both(b.rows);
  return b;
}

// The batch of `step`: row b is a window of seq + 1 bytes of the text (trainer::text_data, made
// with context = seq), a function of (seed, step, b) only, its positions in order or, with
// config::load_balance, in the load-balanced order over X.
template <class Space>
batch<Space> load_batch(const tpx::rank_context& rank, const trainer::text_data& data,
                        const config& c, std::int64_t step) {
  const std::int64_t x_ranks = rank.axis<X>().size;
  return batch_of<Space>(rank, c, [&](std::int64_t i) -> std::int32_t {
    const std::int64_t column = i % columns, t = (i / columns) % c.seq, b = i / columns / c.seq;
    const std::int64_t p = c.load_balance ? tpx::nn::load_balanced_position(t, c.seq, x_ranks) : t;
    if (column == position) return static_cast<std::int32_t>(p);
    return data.byte_at(c.seed, step, c.batch, b, static_cast<int>(p + column));
  });
}

// h's elements into the batch d, whose tensors keep their buffers (the input of a recorded step,
// trainer::recorded_training).
template <class Space>
void copy_batch(batch<Space>& d, const batch<tpx::host_space>& h) {
  const auto copy = [](auto& device, const auto& host) {
    tpx::copy_from_host(device->stream, host->stream);
    tpx::copy_from_host(device->sublayer, host->sublayer);
  };
  if (d.rows) copy(d.rows, h.rows);
  if (d.blocks) copy(d.blocks, h.blocks);
}

}  // namespace gpt

// The forward and backward passes through a stack of L blocks, with activation checkpointing
// (seed 000, "activation checkpointing"): the loop both example models (the MLP trainer's and the
// GPT example's) run between their embedding and their head.
//
//   dx = stack_forward_backward(layers, every, x, forward, head, backward);
//     forward(l, x)            -> block l's saved state s, with s.out the block's output
//     head(x_L)                -> dL/dx_L (the head computes the loss on the side)
//     backward(l, s, dout)     -> dL/d(input of block l), of head's type
// The gradients may be of another type than the activations (the GPT's stream replicated over Y
// has a gradient that is a partial sum over Y).
//
// every = 0 keeps every block's state from the forward pass, so nothing runs twice. every = C > 0
// keeps only the input of every C-th block and, during the backward pass, runs each segment's C
// blocks forward again from its kept input, then back through them: peak memory holds L/C inputs
// and one segment's states instead of L states, for one extra forward pass. Recomputation repeats
// the same operations on the same inputs, so the results are the same to the bit.
//
// block_visits(layers, every) lists the blocks in the order the loop calls forward and backward
// on them, so that a model can fetch each block's weights one visit ahead (examples/gpt/model.hpp
// all-gathers them in the background).
#pragma once

#include <algorithm>
#include <vector>

namespace trainer {

// Calls segment(first, last) for the backward pass's segments [first, last) of `every` blocks
// (every > 0), the last segment first.
template <class Segment>
void segments_last_first(int layers, int every, const Segment& segment) {
  for (int first = ((layers - 1) / every) * every; first >= 0; first -= every)
    segment(first, std::min(first + every, layers));
}

// The block of every call stack_forward_backward(layers, every, ...) makes to forward or
// backward, in order.
inline std::vector<int> block_visits(int layers, int every) {
  std::vector<int> visits;
  for (int l = 0; l < layers; ++l) visits.push_back(l);
  if (every == 0) {
    for (int l = layers - 1; l >= 0; --l) visits.push_back(l);
    return visits;
  }
  segments_last_first(layers, every, [&](int first, int last) {
    for (int l = first; l < last; ++l) visits.push_back(l);      // recomputed
    for (int l = last - 1; l >= first; --l) visits.push_back(l);  // backward
  });
  return visits;
}

template <class Act, class Forward, class Head, class Backward>
auto stack_forward_backward(int layers, int every, Act x, const Forward& forward, const Head& head,
                            const Backward& backward) {
  using State = decltype(forward(0, x));
  std::vector<State> states;
  std::vector<Act> kept;
  for (int l = 0; l < layers; ++l) {
    if (every == 0) {
      states.push_back(forward(l, x));
      x = states.back().out;
    } else {
      if (l % every == 0) kept.push_back(x);
      x = forward(l, x).out;
    }
  }
  auto dx = head(x);
  if (every == 0) {
    for (int l = layers - 1; l >= 0; --l) dx = backward(l, states[l], dx);
    return dx;
  }
  segments_last_first(layers, every, [&](int first, int last) {
    std::vector<State> segment;
    Act xi = kept[first / every];
    for (int l = first; l < last; ++l) {
      segment.push_back(forward(l, xi));
      xi = segment.back().out;
    }
    for (int l = last - 1; l >= first; --l) dx = backward(l, segment[l - first], dx);
  });
  return dx;
}

}  // namespace trainer

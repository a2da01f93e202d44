// The training data: next-byte prediction over a text file, in mini-batches whose content
// depends only on (seed, step, row), never on the mesh.
//
// Row i of the global batch of step s is a window of `context + 1` consecutive bytes starting at
// a position drawn from the counter-based generator keyed by (seed, s * batch + i): the first
// `context` bytes are the input, the last one the target. Each rank builds only its rows (the
// batch dim is split over the data-parallel axis X), and a run resumed at step s sees exactly
// the batches it would have seen: the data position is just the step number.
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <tpx/tpx.hpp>
#include <vector>

namespace trainer {

class text_data {
 public:
  text_data(const std::string& path, int context) : context_(context) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("trainer: cannot read the training text " + path);
    bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    const std::int64_t needed = std::int64_t{context} + 2;  // one window and one more start
    if (static_cast<std::int64_t>(bytes_.size()) < needed)
      throw std::runtime_error("trainer: " + path + " has " + std::to_string(bytes_.size()) +
                               " bytes; a context of " + std::to_string(context) +
                               " needs at least " + std::to_string(needed));
  }

  int context() const { return context_; }
  std::size_t size() const { return bytes_.size(); }

  // Byte k (0..context) of row `row` of the global batch of `step`.
  std::int32_t byte_at(std::uint64_t seed, std::int64_t step, std::int64_t batch, std::int64_t row,
                       int k) const {
    const std::uint64_t positions = bytes_.size() - static_cast<std::uint64_t>(context_);
    const std::uint64_t draw = static_cast<std::uint64_t>(
        tpx::kernels::uniform_at(seed ^ 0x9e3779b97f4a7c15ull,
                                 static_cast<std::uint64_t>(step * batch + row)) *
        static_cast<float>(positions));
    const std::uint64_t start = draw < positions ? draw : positions - 1;
    return static_cast<unsigned char>(bytes_[start + static_cast<std::uint64_t>(k)]);
  }

 private:
  int context_;
  std::string bytes_;
};

}  // namespace trainer

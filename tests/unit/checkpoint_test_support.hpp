// Shared by the checkpoint tests (checkpoint_test.cpp, checkpoint_reliability_test.cpp): scratch
// folders, whole-file reads and writes, the message of what a call throws, and a small sharded
// model saved on a mesh whose every element is known (tpx::randn's element i is
// normal_at(seed, i) on any mesh), so that a load is checked bit for bit against the values saved.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <tpx/io/checkpoint.hpp>
#include <tpx/tpx.hpp>
#include <vector>

namespace checkpoint_test {

TPX_MESH_AXES(X, Y);
TPX_DIMS(D, F, V);

namespace fs = std::filesystem;
namespace io = tpx::io;
using tpx::bf16;
using tpx::Tensor;

// A fresh folder for one test, removed afterwards.
struct scratch_folder {
  fs::path path;
  explicit scratch_folder(const std::string& name)
      : path(fs::temp_directory_path() /
             ("tpx-checkpoint-test-" + std::to_string(::getpid()) + "-" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  scratch_folder(const scratch_folder&) = delete;
  scratch_folder& operator=(const scratch_folder&) = delete;
  ~scratch_folder() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

inline std::vector<std::byte> bytes_of(const std::string& text) {
  const auto b = std::as_bytes(std::span(text));
  return {b.begin(), b.end()};
}
inline std::vector<std::byte> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> chars{std::istreambuf_iterator<char>(in), {}};
  const auto b = std::as_bytes(std::span(chars));
  return {b.begin(), b.end()};
}
inline void write_file(const fs::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// The message of what fn throws ("" if nothing).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Whether every element of t's block is, bit for bit, value_at(its global row-major index).
template <class Tn, class Fn>
bool block_matches(const Tn& t, Fn value_at) {
  constexpr std::size_t n = Tn::order;
  tpx::index_array<n> at{};
  for (std::size_t i = 0; i < t.size(); ++i) {
    std::int64_t g = 0;
    for (std::size_t d = 0; d < n; ++d) g = g * t.global_extent(d) + t.local_offset(d) + at[d];
    const typename Tn::value_type want = value_at(g);
    if (std::memcmp(&want, &t.local()[i], sizeof want) != 0) return false;
    for (std::size_t d = n; d-- > 0;) {
      if (++at[d] < t.local_extent(d)) break;
      at[d] = 0;
    }
  }
  return true;
}
inline auto normal(std::uint64_t seed) {
  return [seed](std::int64_t i) {
    return tpx::kernels::normal_at(seed, static_cast<std::uint64_t>(i));
  };
}
inline auto normal_bf16(std::uint64_t seed) {
  return [seed](std::int64_t i) {
    return bf16(tpx::kernels::normal_at(seed, static_cast<std::uint64_t>(i)));
  };
}

// The tensors of the sharded tests, saved on a 2x2 mesh: two 7x5 matrices in transposed
// shardings, a 1-D vector split over both axes (Y major), a replicated vector, a bf16 matrix
// and a 1x1 matrix that most ranks hold no element of.
template <class R>
void save_model(R& rank, const io::checkpoint_directory& dir, std::int64_t step,
                std::uint64_t seed) {
  io::checkpoint_writer out(rank, dir, step);
  out.add("w_in", tpx::randn<float, D<X>, F<Y>>(rank, {D(7), F(5)}, seed));
  out.add("w_out", tpx::randn<float, F<Y>, D<X>>(rank, {F(5), D(7)}, seed + 1));
  out.add("embed", tpx::randn<float, V<Y, X>>(rank, {V(11)}, seed + 2));
  out.add("norm", tpx::randn<float, D<>>(rank, {D(7)}, seed + 3));
  out.add("half", tpx::randn<bf16, D<X>, F<>>(rank, {D(7), F(5)}, seed + 4));
  out.add("tiny", tpx::randn<float, D<X>, F<Y>>(rank, {D(1), F(1)}, seed + 5));
  out.save({{"data_position", 123}, {"lr", 0.5}});
}

// Loads the tensors of save_model into the shardings given as types and counts wrong blocks.
template <class WIn, class WOut, class Embed, class Norm, class Half, class R>
int wrong_blocks(R& rank, io::checkpoint_reader& in, std::uint64_t seed) {
  WIn w_in(rank, {D(7), F(5)});
  WOut w_out(rank, {F(5), D(7)});
  Embed embed(rank, {V(11)});
  Norm norm(rank, {D(7)});
  Half half(rank, {D(7), F(5)});
  Tensor<float, D<>, F<>> tiny(rank, {D(1), F(1)});
  in.load("w_in", w_in);
  in.load("w_out", w_out);
  in.load("embed", embed);
  in.load("norm", norm);
  in.load("half", half);
  in.load("tiny", tiny);
  return !block_matches(w_in, normal(seed)) + !block_matches(w_out, normal(seed + 1)) +
         !block_matches(embed, normal(seed + 2)) + !block_matches(norm, normal(seed + 3)) +
         !block_matches(half, normal_bf16(seed + 4)) + !block_matches(tiny, normal(seed + 5));
}

}  // namespace checkpoint_test

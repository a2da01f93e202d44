// Checkpoints (include/tpx/io; their XXH64 checksum is checksum_test.cpp's): the safetensors
// writer against the exact bytes the format's reference implementation produces, its reader on
// round trips and on damaged files; atomic writes; and sharded checkpoints saved on a 2x2 mesh
// and loaded onto 4x1, 1x2, 1x1 and 2x2 meshes, into the saved shardings and into others, every
// element compared bit for bit with the global values (tpx::randn's element i is normal_at(seed,
// i) on any mesh). Also: what the manifest records, the "latest" pointer, a crashed write that
// must not disturb the last checkpoint, a corrupted file caught by its checksum, and the errors
// for a missing tensor or a mismatched shape, dims or dtype.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoint_test_support.hpp"

namespace {

using namespace checkpoint_test;

TPX_MESH_AXES(P);
TPX_DIMS(S);

// A sink that keeps what it is given, to look at written bytes without a file.
struct byte_sink {
  std::vector<std::byte> bytes;
  void write(std::span<const std::byte> b) { bytes.insert(bytes.end(), b.begin(), b.end()); }
};

std::vector<std::byte> length_prefix(std::uint64_t n) {
  std::vector<std::byte> b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::byte>(n >> (8 * i));
  return b;
}
template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

}  // namespace

TEST_CASE("safetensors files are byte for byte what the format's reference writes") {
  SUBCASE("one F32 tensor: 8-byte length, JSON, data") {
    const std::vector<float> values = {0, 1, 2, 3, 4, 5};
    byte_sink out;
    io::write_safetensors(out, {{"attn.0", io::dtype::f32, {1, 2, 3}, bytes_of(values)}}, {});
    const std::string header =
        R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    REQUIRE(header.size() == 64);
    std::vector<std::byte> want = length_prefix(64);
    for (std::byte b : bytes_of(header)) want.push_back(b);
    for (std::byte b : bytes_of(values)) want.push_back(b);
    CHECK(out.bytes == want);
  }
  SUBCASE("metadata only: the JSON padded with spaces to a multiple of 8") {
    byte_sink out;
    io::write_safetensors(out, {}, {{"framework", "pt"}});
    std::vector<std::byte> want = length_prefix(40);
    for (std::byte b : bytes_of(R"({"__metadata__":{"framework":"pt"}})"
                                "     "))
      want.push_back(b);
    CHECK(out.bytes == want);
  }
  SUBCASE("wider elements first, then by name, so that each tensor is aligned") {
    const std::vector<bf16> a = {bf16(1.0f), bf16(2.0f), bf16(3.0f)};
    const std::vector<float> b = {4.0f};
    byte_sink out;
    io::write_safetensors(
        out, {{"a", io::dtype::bf16, {3}, bytes_of(a)}, {"b", io::dtype::f32, {1}, bytes_of(b)}},
        {});
    std::string header = R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("a":{"dtype":"BF16","shape":[3],"data_offsets":[4,10]}})";
    header.append((8 - header.size() % 8) % 8, ' ');
    std::vector<std::byte> want = length_prefix(header.size());
    for (std::byte x : bytes_of(header)) want.push_back(x);
    for (std::byte x : bytes_of(b)) want.push_back(x);
    for (std::byte x : bytes_of(a)) want.push_back(x);
    CHECK(out.bytes == want);
  }
  SUBCASE("a tensor whose bytes do not match its shape is refused") {
    const std::vector<float> values = {1, 2, 3};
    byte_sink out;
    CHECK(contains(
        error_of([&] {
          io::write_safetensors(out, {{"w", io::dtype::f32, {2, 2}, bytes_of(values)}}, {});
        }),
        "tensor 'w' of shape [2, 2]"));
  }
}

TEST_CASE("safetensors round trip: F32 and BF16 tensors, an empty one, a scalar, metadata") {
  scratch_folder dir("round-trip");
  const fs::path file = dir.path / "t.safetensors";
  std::vector<float> w(6 * 4);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = tpx::kernels::normal_at(7, i);
  std::vector<bf16> h(5);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = bf16(tpx::kernels::normal_at(8, i));
  const std::vector<float> scalar = {42.0f}, empty;
  const io::metadata_map metadata = {{"step", "40"}, {"note", "{\"json\": [1, 2]}"}};
  const io::file_digest digest = io::write_atomically(file, [&](io::file_sink& out) {
    io::write_safetensors(out,
                          {{"h", io::dtype::bf16, {5}, bytes_of(h)},
                           {"w", io::dtype::f32, {6, 4}, bytes_of(w)},
                           {"scalar", io::dtype::f32, {}, bytes_of(scalar)},
                           {"empty", io::dtype::f32, {0, 3}, bytes_of(empty)}},
                          metadata);
  });
  CHECK(digest == io::digest_file(file));
  CHECK(digest.bytes == fs::file_size(file));

  const io::safetensors_header header = io::read_safetensors_header(file);
  CHECK(header.metadata == metadata);
  CHECK(header.data_start % 8 == 0);
  CHECK(header.tensors.size() == 4);
  CHECK(header.tensor("w").shape == std::vector<std::int64_t>{6, 4});
  CHECK(header.tensor("h").dtype == io::dtype::bf16);
  CHECK(header.tensor("scalar").shape.empty());
  CHECK(header.tensor("empty").begin == header.tensor("empty").end);
  for (const io::tensor_info& t : header.tensors)
    CHECK((header.data_start + t.begin) % io::dtype_size(t.dtype) == 0);

  std::vector<float> w_back(w.size()), s_back(1), tail(4);
  std::vector<bf16> h_back(h.size());
  io::read_elements(header, header.tensor("w"), 0, std::span(w_back));
  io::read_elements(header, header.tensor("h"), 0, std::span(h_back));
  io::read_elements(header, header.tensor("scalar"), 0, std::span(s_back));
  io::read_elements(header, header.tensor("w"), 20, std::span(tail));
  CHECK(std::memcmp(w_back.data(), w.data(), w.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(h_back.data(), h.data(), h.size() * sizeof(bf16)) == 0);
  CHECK(s_back[0] == 42.0f);
  CHECK(std::equal(tail.begin(), tail.end(), w.begin() + 20));
  CHECK(contains(
      error_of([&] { io::read_elements(header, header.tensor("h"), 0, std::span(w_back)); }),
      "tensor 'h' is BF16, not the F32 asked for"));
  CHECK(contains(error_of([&] { (void)header.tensor("nope"); }),
                 "t.safetensors: has no tensor 'nope'"));
}

TEST_CASE("the safetensors reader rejects damaged files, naming the file and the tensor") {
  scratch_folder dir("damaged");
  const fs::path file = dir.path / "bad.safetensors";
  // A file with the given header text (as is, unpadded) and data_bytes zero bytes of data.
  const auto make = [&](const std::string& header, std::size_t data_bytes) {
    std::vector<std::byte> bytes = length_prefix(header.size());
    const auto text = std::as_bytes(std::span(header));
    bytes.insert(bytes.end(), text.begin(), text.end());
    bytes.resize(bytes.size() + data_bytes);
    write_file(file, bytes);
  };
  const auto problem = [&] { return error_of([&] { (void)io::read_safetensors_header(file); }); };
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  make(good, 8);
  CHECK(problem().empty());

  const std::vector<std::byte> whole = read_file(file);
  SUBCASE("shorter than the length field") {
    write_file(file, std::span(whole).first(5));
    CHECK(contains(problem(), "bad.safetensors: not a valid safetensors file: it has 5 bytes"));
  }
  SUBCASE("truncated inside the header") {
    write_file(file, std::span(whole).first(30));
    CHECK(contains(problem(),
                   "bad.safetensors: not a valid safetensors file: header length 54 runs past "
                   "the end of the 30-byte file (truncated?)"));
  }
  SUBCASE("truncated inside the data") {
    write_file(file, std::span(whole).first(whole.size() - 1));
    CHECK(
        contains(problem(), "the tensors index 8 bytes of data but the file holds 7 (truncated?)"));
  }
  SUBCASE("bytes after the last tensor") {
    make(good, 9);
    CHECK(contains(problem(), "the tensors index 8 bytes of data but the file holds 9"));
  }
  SUBCASE("an absurd header length") {
    std::vector<std::byte> bytes = whole;
    bytes[7] = std::byte{1};
    write_file(file, bytes);
    CHECK(contains(problem(), "exceeds the limit of 100000000 bytes"));
  }
  SUBCASE("header is not JSON, or not an object") {
    make(R"({"a":{"dtype":"F32",)", 0);
    CHECK(contains(problem(),
                   "bad.safetensors: not a valid safetensors file: the header is not JSON"));
    make(R"([1, 2])", 0);
    CHECK(contains(problem(), "does not start with '{'"));
  }
  SUBCASE("duplicate key") {
    make(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
         R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
         8);
    CHECK(contains(problem(), "the header has the key 'a' twice"));
  }
  SUBCASE("byte count does not match shape and dtype") {
    make(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
    CHECK(contains(problem(),
                   "tensor 'a': shape [3] of F32 needs 12 bytes but data_offsets [0,8] span 8"));
  }
  SUBCASE("overlapping and missing bytes") {
    make(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
         8);
    CHECK(contains(problem(), "the data of tensor 'b' overlaps that of tensor 'a'"));
    make(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8);
    CHECK(contains(problem(), "bytes [0, 4) before tensor 'a' belong to no tensor"));
  }
  SUBCASE("a dtype tpx does not read, a negative size") {
    make(R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", 8);
    CHECK(contains(problem(), "tensor 'a': dtype \"F16\" is not one tpx reads (F32, BF16)"));
    make(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8);
    CHECK(contains(problem(), "tensor 'a': shape [-2] is not a list of sizes"));
  }
  SUBCASE("metadata values must be strings") {
    make(R"({"__metadata__":{"step":40}})", 0);
    CHECK(contains(problem(), "__metadata__ value of 'step' is not a string"));
  }
}

TEST_CASE("write_atomically replaces a file whole, or leaves it as it was") {
  scratch_folder dir("atomic");
  const fs::path file = dir.path / "f.txt";
  const auto write_text = [&](const std::string& text, bool fail_midway) {
    return io::write_atomically(file, [&](io::file_sink& out) {
      out.write(std::as_bytes(std::span(text)).first(text.size() / 2));
      if (fail_midway) throw std::runtime_error("disk on fire");
      out.write(std::as_bytes(std::span(text)).subspan(text.size() / 2));
    });
  };
  write_text("old contents", false);
  CHECK(contains(error_of([&] { write_text("new contents", true); }), "disk on fire"));
  CHECK(read_file(file) == bytes_of("old contents"));
  const io::file_digest digest = write_text("new contents", false);
  CHECK(read_file(file) == bytes_of("new contents"));
  CHECK(digest == io::digest_file(file));
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) ==
        1);  // no .tmp left
}

TEST_CASE("a checkpoint saved on 2x2 loads onto 4x1, 1x2, 1x1 and 2x2, in any sharding") {
  scratch_folder dir("reshard");
  const io::checkpoint_directory ckpt(dir.path);
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) { save_model(rank, ckpt, 40, 1); });
  for (const auto& values : {std::pair{4, 1}, std::pair{1, 2}, std::pair{1, 1}, std::pair{2, 2}}) {
    // plain variables, not bindings: clang before 16 cannot capture bindings in lambdas
    const int x = std::get<0>(values), y = std::get<1>(values);
    CAPTURE(x);
    CAPTURE(y);
    std::atomic<int> wrong{0}, wrong_state{0};
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{x, y}, [&](auto& rank) {
      io::checkpoint_reader in(dir.path);
      wrong_state +=
          in.step() != 40 || in.state()["data_position"] != 123 || in.state()["lr"] != 0.5;
      // As saved (on 2x2 this is a same-mesh resume: every element bit-exact).
      wrong +=
          wrong_blocks<Tensor<float, D<X>, F<Y>>, Tensor<float, F<Y>, D<X>>, Tensor<float, V<Y, X>>,
                       Tensor<float, D<>>, Tensor<bf16, D<X>, F<>>>(rank, in, 1);
      // Replicated everywhere.
      wrong += wrong_blocks<Tensor<float, D<>, F<>>, Tensor<float, F<>, D<>>, Tensor<float, V<>>,
                            Tensor<float, D<>>, Tensor<bf16, D<>, F<>>>(rank, in, 1);
      // Other shardings: axes swapped, the vector split X-major, the replicated vector sharded.
      wrong +=
          wrong_blocks<Tensor<float, D<Y>, F<X>>, Tensor<float, F<X>, D<>>, Tensor<float, V<X, Y>>,
                       Tensor<float, D<X>>, Tensor<bf16, D<>, F<Y>>>(rank, in, 1);
    });
    CHECK(wrong == 0);
    CHECK(wrong_state == 0);
  }
}

TEST_CASE("resharding in a chain: saved on 2x2, resaved on 4x1, loaded on 1x1") {
  scratch_folder dir("chain");
  const io::checkpoint_directory ckpt(dir.path);
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) { save_model(rank, ckpt, 1, 3); });
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{4, 1}, [&](auto& rank) {
    io::checkpoint_reader in(dir.path);
    Tensor<float, D<>, F<X>> w_in(rank, {D(7), F(5)});
    Tensor<float, V<X>> embed(rank, {V(11)});
    in.load("w_in", w_in);
    in.load("embed", embed);
    io::checkpoint_writer out(rank, ckpt, 2);
    out.add("w_in", w_in);
    out.add("embed", embed);
    out.save(in.state());
  });
  std::atomic<int> wrong{0};
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) {
    io::checkpoint_reader in(dir.path);
    Tensor<float, D<X>, F<Y>> w_in(rank, {D(7), F(5)});
    Tensor<float, V<Y, X>> embed(rank, {V(11)});
    in.load("w_in", w_in);
    in.load("embed", embed);
    wrong += in.step() != 2 || in.state()["data_position"] != 123;
    wrong += !block_matches(w_in, normal(3)) + !block_matches(embed, normal(5));
  });
  CHECK(wrong == 0);
}

// A stack of layers [S_P, D_X, F_Y] saved block by block (add_blocks: each block a tensor [D, F]
// of its own, under its layer's name) loads as the separate tensors on a mesh without P, and onto
// another number of stages with load_blocks; a block left out is not in the checkpoint, and a
// block load_blocks is not given a name for keeps its elements.
TEST_CASE("a stack saved block by block loads as separate layers and onto other stage counts") {
  scratch_folder dir("blocks");
  const io::checkpoint_directory ckpt(dir.path);
  const auto layer = [](std::int64_t s) {
    return s == 3 ? std::string() : "layer." + std::to_string(s);
  };
  constexpr std::int64_t layers = 4, d = 7, f = 5;
  tpx::spmd(tpx::host, tpx::Mesh<P, X, Y>{2, 2, 1}, [&](auto& rank) {
    io::checkpoint_writer out(rank, ckpt, 1);
    out.add_blocks(layer, tpx::randn<float, S<P>, D<X>, F<Y>>(rank, {S(layers), D(d), F(f)}, 9));
    out.save();
  });
  const io::checkpoint_reader saved(dir.path);
  CHECK(saved.manifest()["tensors"].size() == 3);  // layer.3 left out
  CHECK(saved.manifest()["tensors"]["layer.1"]["notation"] == "[D_X, F_Y]");
  // Element (s, i) of the stack, i the row-major index within a layer.
  const auto stacked = [](std::int64_t s) {
    return [s](std::int64_t i) { return normal(9)(s * d * f + i); };
  };
  std::atomic<int> wrong{0};
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 2}, [&](auto& rank) {
    io::checkpoint_reader in(dir.path);
    for (std::int64_t s = 0; s < 3; ++s) {
      Tensor<float, F<Y>, D<>> transposed_split(rank, {F(f), D(d)});
      CHECK(contains(error_of([&] { in.load(layer(s), transposed_split); }), "has dims"));
      Tensor<float, D<>, F<Y>> w(rank, {D(d), F(f)});
      in.load(layer(s), w);
      wrong += !block_matches(w, stacked(s));
    }
  });
  for (const int stages : {4, 1}) {
    CAPTURE(stages);
    tpx::spmd(tpx::host, tpx::Mesh<P, X, Y>{stages, 1, 2}, [&](auto& rank) {
      io::checkpoint_reader in(dir.path);
      auto stack = tpx::randn<float, S<P>, D<>, F<Y>>(rank, {S(layers), D(d), F(f)}, 10);
      in.load_blocks(layer, stack);
      const std::vector<float> got = tpx::to_global(stack);
      for (std::int64_t s = 0; s < layers; ++s)
        for (std::int64_t i = 0; i < d * f; ++i)
          wrong += got[static_cast<std::size_t>(s * d * f + i)] !=
                   (s == 3 ? normal(10)(s * d * f + i) : stacked(s)(i));
    });
  }
  CHECK(wrong == 0);
}

TEST_CASE("the manifest indexes every block once, with each file's size and checksum") {
  scratch_folder dir("manifest");
  const io::checkpoint_directory ckpt(dir.path);
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) { save_model(rank, ckpt, 7, 1); });
  const fs::path folder = dir.path / "step-00000007";
  CHECK(io::latest_step(dir.path) == 7);
  const io::checkpoint_reader in(dir.path);
  const nlohmann::json& m = in.manifest();
  CHECK(m["format"] == "tpx-checkpoint");
  CHECK(m["mesh"] == nlohmann::json::parse(R"([{"axis":"X","size":2},{"axis":"Y","size":2}])"));
  CHECK(m["files"].size() == 4);
  for (int r = 0; r < 4; ++r) {
    const io::file_digest d = io::digest_file(folder / io::rank_file_name(r));
    CHECK(m["files"][r]["name"] == io::rank_file_name(r));
    CHECK(m["files"][r]["bytes"] == d.bytes);
    CHECK(m["files"][r]["xxh64"] == io::to_hex(d.xxh64));
    CHECK(!fs::exists(folder / io::rank_record_name(r)));  // the ranks' parts were merged
  }
  const nlohmann::json& w_in = m["tensors"]["w_in"];
  CHECK(w_in["notation"] == "[D_X, F_Y]");
  CHECK(w_in["dims"] == nlohmann::json::parse(R"(["D","F"])"));
  CHECK(w_in["global_shape"] == nlohmann::json::parse("[7,5]"));
  CHECK(w_in["blocks"].size() == 4);
  CHECK(w_in["blocks"][3] ==
        nlohmann::json::parse(R"({"file":3,"offsets":[4,3],"extents":[3,2]})"));
  CHECK(m["tensors"]["norm"]["blocks"].size() == 1);  // replicated: written by rank 0 only
  CHECK(m["tensors"]["half"]["blocks"].size() == 2);  // replicated over Y: ranks (0,0) and (1,0)
  CHECK(m["tensors"]["half"]["dtype"] == "BF16");
  // Each rank file is a safetensors file that says where its blocks lie.
  const io::safetensors_header rank3 = io::read_safetensors_header(folder / "rank-3.safetensors");
  CHECK(rank3.tensor("w_in").shape == std::vector<std::int64_t>{3, 2});
  const nlohmann::json where = nlohmann::json::parse(rank3.metadata.at("w_in"));
  CHECK(where["offsets"] == nlohmann::json::parse("[4,3]"));
  CHECK(where["global_shape"] == nlohmann::json::parse("[7,5]"));
}

TEST_CASE("latest names the newest complete checkpoint; older ones stay loadable") {
  scratch_folder dir("latest");
  const io::checkpoint_directory ckpt(dir.path);
  CHECK(!io::latest_step(dir.path).has_value());
  CHECK(contains(error_of([&] { io::checkpoint_reader in(dir.path); }), "holds no checkpoint"));
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [&](auto& rank) { save_model(rank, ckpt, 10, 1); });
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [&](auto& rank) { save_model(rank, ckpt, 20, 11); });
  CHECK(io::latest_step(dir.path) == 20);
  std::atomic<int> wrong{0};
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 2}, [&](auto& rank) {
    io::checkpoint_reader newest(dir.path), older(dir.path, 10);
    wrong += newest.step() != 20 || older.step() != 10;
    Tensor<float, D<X>, F<Y>> w_in(rank, {D(7), F(5)});
    newest.load("w_in", w_in);
    wrong += !block_matches(w_in, normal(11));
    older.load("w_in", w_in);
    wrong += !block_matches(w_in, normal(1));
  });
  CHECK(wrong == 0);
}

TEST_CASE("a write that crashed leaves stray temporary files that change nothing") {
  scratch_folder dir("crash");
  const io::checkpoint_directory ckpt(dir.path);
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) { save_model(rank, ckpt, 10, 1); });
  // Step 20 died after some ranks wrote: a half-written temporary, a finished rank file and a
  // rank's part of the manifest, but no manifest, and latest never moved. Step 10's folder and
  // dir also hold temporaries of an interrupted rewrite.
  const fs::path step20 = dir.path / "step-00000020";
  fs::create_directories(step20);
  write_file(step20 / "rank-0.safetensors.tmp.4242.0", bytes_of("half a fi"));
  fs::copy_file(dir.path / "step-00000010" / "rank-1.safetensors", step20 / "rank-1.safetensors");
  write_file(step20 / "rank-1.json", bytes_of("{}"));
  write_file(dir.path / "latest.tmp.4242.1", bytes_of("step-00000020\n"));
  write_file(dir.path / "step-00000010" / "manifest.json.tmp.4242.2", bytes_of("{\"format\":"));
  write_file(dir.path / "step-00000010" / "rank-2.safetensors.tmp.4242.3", bytes_of("garbage"));

  CHECK(io::latest_step(dir.path) == 10);
  CHECK(contains(error_of([&] { io::checkpoint_reader in(dir.path, 20); }),
                 "manifest.json: missing: step 20 was never completely saved"));
  std::atomic<int> wrong{0};
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
    io::checkpoint_reader in(dir.path);
    wrong += in.step() != 10;
    wrong +=
        wrong_blocks<Tensor<float, D<X>, F<Y>>, Tensor<float, F<Y>, D<X>>, Tensor<float, V<Y, X>>,
                     Tensor<float, D<>>, Tensor<bf16, D<X>, F<>>>(rank, in, 1);
  });
  CHECK(wrong == 0);
}

TEST_CASE("a damaged rank file fails its checksum, naming the file") {
  scratch_folder dir("corrupt");
  const io::checkpoint_directory ckpt(dir.path);
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [&](auto& rank) { save_model(rank, ckpt, 5, 1); });
  const fs::path victim = dir.path / "step-00000005" / "rank-1.safetensors";
  std::vector<std::byte> bytes = read_file(victim);
  const auto load_all = [&] {
    return error_of([&] {
      tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) {
        io::checkpoint_reader in(dir.path);
        Tensor<float, D<>, F<>> w_in(rank, {D(7), F(5)});
        in.load("w_in", w_in);
      });
    });
  };
  CHECK(load_all().empty());
  SUBCASE("one bit flipped in the data") {
    bytes[bytes.size() - 3] ^= std::byte{0x10};
    write_file(victim, bytes);
    const std::string error = load_all();
    CHECK(contains(error, "step-00000005/rank-1.safetensors: checksum mismatch"));
    CHECK(contains(error, "the file was changed or damaged after it was written"));
  }
  SUBCASE("truncated") {
    write_file(victim, std::span(bytes).first(bytes.size() / 2));
    CHECK(contains(load_all(), "rank-1.safetensors: checksum mismatch: the manifest records " +
                                   std::to_string(bytes.size()) + " bytes"));
  }
  SUBCASE("a rank whose block lies elsewhere never reads the damaged file") {
    bytes[bytes.size() - 3] ^= std::byte{0x10};
    write_file(victim, bytes);
    std::atomic<int> wrong{0};
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [&](auto& rank) {
      if (rank.template coord<X>() != 0) return;
      io::checkpoint_reader in(dir.path, 5);  // a given step: verified file by file, as loaded
      Tensor<float, D<X>, F<Y>> w_in(rank, {D(7), F(5)});
      in.load("w_in", w_in);
      wrong += !block_matches(w_in, normal(1));
    });
    CHECK(wrong == 0);
  }
}

TEST_CASE("load names the tensor, what the program expects and what the checkpoint has") {
  scratch_folder dir("mismatch");
  const io::checkpoint_directory ckpt(dir.path);
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) { save_model(rank, ckpt, 3, 1); });
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) {
    io::checkpoint_reader in(dir.path);
    Tensor<float, D<X>, F<Y>> w(rank, {D(8), F(5)});
    CHECK(contains(error_of([&] { in.load("nope", w); }),
                   "has no tensor 'nope' (it has: embed, half, norm, tiny, w_in, w_out)"));
    CHECK(contains(error_of([&] { in.load("w_in", w); }),
                   "tensor 'w_in': the tensor [D_X, F_Y] loaded into has global_shape [8,5], the "
                   "checkpoint has [7,5]"));
    Tensor<float, F<>, D<>> transposed(rank, {F(7), D(5)});
    CHECK(contains(
        error_of([&] { in.load("w_in", transposed); }),
        "tensor 'w_in': the tensor [F, D] loaded into has dims [\"F\",\"D\"], the checkpoint "
        "has [\"D\",\"F\"]"));
    Tensor<bf16, D<>, F<>> narrow(rank, {D(7), F(5)});
    CHECK(contains(error_of([&] { in.load("w_in", narrow); }),
                   "tensor 'w_in': the tensor [D, F] loaded into has dtype \"BF16\", the "
                   "checkpoint has \"F32\""));
  });
}

TEST_CASE("save refuses a tensor that some rank forgot to add, and a name added twice") {
  scratch_folder dir("forgot");
  const io::checkpoint_directory ckpt(dir.path);
  const std::string error = error_of([&] {
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [&](auto& rank) {
      io::checkpoint_writer out(rank, ckpt, 1);
      if (rank.template coord<X>() == 0) out.add("w", tpx::randn<float, D<X>>(rank, {D(6)}, 1));
      out.save();
    });
  });
  CHECK(contains(
      error, "tensor 'w' has 6 elements but the ranks saved blocks of 3 (did every rank add it?)"));
  CHECK(!io::latest_step(dir.path).has_value());
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) {
    io::checkpoint_writer out(rank, ckpt, 1);
    const auto w = tpx::randn<float, D<X>>(rank, {D(6)}, 1);
    out.add("w", w);
    CHECK(contains(error_of([&] { out.add("w", w); }), "tensor 'w' is added twice"));
  });
}

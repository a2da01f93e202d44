// Checkpoints that lose nothing and mix nothing (issue 12): one writer per folder (the lock
// refuses a second, naming the folder and the holder's pid); a manifest edited by hand is caught
// by its checksum, and one re-sealed after the edit by the files themselves (each records its
// blocks' places, its run and its step); a damaged newest checkpoint gives way to the newest
// valid one, with its weights bit for bit and a warning naming what was wrong; temporaries of
// killed writers are removed when the next writer takes the folder; only the newest K complete
// checkpoints are kept; a process joining a folder another process of its job holds takes no
// lock, removes nothing and cannot apply retention.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_test_support.hpp"

namespace {

using namespace checkpoint_test;

// The manifest of a step, parsed, and a way to write it back after an edit: as it is (a hand
// edit the checksum catches) or re-sealed with a fresh checksum (a forger's edit).
struct manifest_file {
  fs::path path;
  nlohmann::json json;
  manifest_file(const fs::path& dir, std::int64_t step)
      : path(io::step_folder(dir, step) / "manifest.json"),
        json(nlohmann::json::parse(io::read_text_file(path))) {}
  void write(bool reseal) {
    if (reseal) json[io::manifest_checksum_key] = io::to_hex(io::manifest_checksum(json));
    write_file(path, bytes_of(json.dump(1)));
  }
};

// The message of loading every tensor of save_model's checkpoint of `step` on one rank.
std::string load_error(const fs::path& dir, std::int64_t step) {
  return error_of([&] {
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 1}, [&](auto& rank) {
      io::checkpoint_reader in(dir, step);
      wrong_blocks<Tensor<float, D<>, F<>>, Tensor<float, F<>, D<>>, Tensor<float, V<>>,
                   Tensor<float, D<>>, Tensor<bf16, D<>, F<>>>(rank, in, 1);
    });
  });
}

void flip_a_bit(const fs::path& file) {
  std::vector<std::byte> bytes = read_file(file);
  bytes[bytes.size() - 3] ^= std::byte{0x10};
  write_file(file, bytes);
}

}  // namespace

TEST_CASE("a second writer of a folder is refused, naming the folder and the holder's pid") {
  scratch_folder dir("lock");
  {
    const io::checkpoint_directory first(dir.path);
    const std::string error = error_of([&] { io::checkpoint_directory second(dir.path); });
    CHECK(contains(error, dir.path.string() + ": checkpoint folder is in use by another writer"));
    CHECK(contains(error, "(pid " + std::to_string(::getpid()) + ")"));
    CHECK(contains(error, "would mix their checkpoints"));
  }
  CHECK(error_of([&] { io::checkpoint_directory again(dir.path); }).empty());  // released
}

TEST_CASE("a process joining a folder held elsewhere neither locks, tidies nor retains it") {
  // The other processes of an MPI job (examples/trainer/training.hpp): world rank 0 holds the
  // folder, the others write their rank files into it under the holder's run id.
  scratch_folder dir("held-elsewhere");
  const io::checkpoint_directory holder(dir.path, {.keep = 1});
  write_file(dir.path / "latest.tmp.4242.0", bytes_of("step-"));
  const std::string error = error_of([&] {
    // The holder's lock does not refuse it: it takes none.
    const io::checkpoint_directory joined(dir.path, io::held_elsewhere{holder.run_id()});
    CHECK(joined.run_id() == holder.run_id());
    CHECK(joined.path() == dir.path);
    CHECK(fs::exists(dir.path / "latest.tmp.4242.0"));  // the holder's to remove, not its
    joined.retain(5);
  });
  CHECK(contains(error, dir.path.string() + ": retention is the work of the process that holds "
                                            "the folder's lock (world rank 0)"));
  CHECK(error_of([&] { holder.retain(5); }).empty());
}

TEST_CASE("a folder that cannot be created is refused when the directory is opened") {
  scratch_folder dir("unusable");
  write_file(dir.path / "a-file", bytes_of("not a folder"));
  const fs::path inside_a_file = dir.path / "a-file" / "ckpt";
  const std::string error = error_of([&] { io::checkpoint_directory d(inside_a_file); });
  CHECK(contains(error, inside_a_file.string() + ": cannot create"));
}

TEST_CASE("a hand-edited manifest is refused: swapped block files or offsets, any value") {
  scratch_folder dir("edited");
  const io::checkpoint_directory ckpt(dir.path);
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) { save_model(rank, ckpt, 4, 1); });
  manifest_file manifest(dir.path, 4);
  nlohmann::json& blocks = manifest.json["tensors"]["w_in"]["blocks"];
  CHECK(load_error(dir.path, 4).empty());

  SUBCASE("two blocks' files swapped") {
    std::swap(blocks[0]["file"], blocks[1]["file"]);
    manifest.write(false);
    CHECK(contains(load_error(dir.path, 4),
                   "step-00000004/manifest.json: manifest checksum mismatch"));
    CHECK(contains(load_error(dir.path, 4), "edited or damaged after it was written"));
    manifest.write(true);  // re-sealed: each file still says where its block lies
    CHECK(contains(load_error(dir.path, 4),
                   ".safetensors: tensor 'w_in': the file places its "
                   "block at offsets"));
  }
  SUBCASE("two blocks' places swapped") {
    std::swap(blocks[0]["offsets"], blocks[3]["offsets"]);  // and extents: still a tiling
    std::swap(blocks[0]["extents"], blocks[3]["extents"]);
    manifest.write(false);
    CHECK(contains(load_error(dir.path, 4), "manifest.json: manifest checksum mismatch"));
    manifest.write(true);
    CHECK(contains(load_error(dir.path, 4),
                   "rank-0.safetensors: tensor 'w_in': the file places "
                   "its block at offsets [0,0], the manifest at [4,3]"));
  }
  SUBCASE("a value of the trainer's state") {
    for (const std::int64_t position : {std::int64_t{-5}, std::int64_t{1} << 40}) {
      manifest.json["state"]["data_position"] = position;
      manifest.write(false);
      CHECK(contains(load_error(dir.path, 4), "manifest.json: manifest checksum mismatch"));
    }
  }
  SUBCASE("a block's offset at the limit of int64, re-sealed (found by checkpoint_manifest_fuzz)") {
    blocks[1]["offsets"][0] = std::numeric_limits<std::int64_t>::max();
    manifest.write(true);
    CHECK(contains(load_error(dir.path, 4), "manifest.json: block {\"extents\":"));
    CHECK(contains(load_error(dir.path, 4), "lies outside its tensor or names no file"));
  }
  SUBCASE(
      "numbers that are not whole or do not fit, re-sealed (found by checkpoint_manifest_fuzz)") {
    SUBCASE("a file index of 1e300") {
      blocks[0]["file"] = 1e300;
      manifest.write(true);
      CHECK(contains(load_error(dir.path, 4),
                     "manifest.json: a block's file is 1e+300, not a whole "
                     "number between -2147483648 and 2147483647"));
    }
    SUBCASE("a file index beyond int") {
      blocks[0]["file"] = std::int64_t{1} << 40;
      manifest.write(true);
      CHECK(contains(load_error(dir.path, 4), "a block's file is 1099511627776, not a whole"));
    }
    SUBCASE("an extent of 2.5") {
      blocks[0]["extents"][1] = 2.5;
      manifest.write(true);
      CHECK(contains(load_error(dir.path, 4), "a block's extents element is 2.5, not a whole"));
    }
    SUBCASE("a negative file size") {
      manifest.json["files"][0]["bytes"] = -1;
      manifest.write(true);
      CHECK(
          contains(load_error(dir.path, 4), "a file's bytes is -1, not a whole number between 0"));
    }
    SUBCASE("a global shape that is not an array") {
      manifest.json["tensors"]["w_in"]["global_shape"] = "8x6";
      manifest.write(true);
      CHECK(contains(load_error(dir.path, 4), "global_shape is \"8x6\", not an array"));
    }
  }
  SUBCASE("the checksum removed") {
    manifest.json.erase(io::manifest_checksum_key);
    manifest.write(false);
    CHECK(contains(load_error(dir.path, 4), "manifest.json: not a valid tpx checkpoint manifest"));
  }
}

TEST_CASE("a file of another run or another step is refused, naming it") {
  scratch_folder dir("mixed"), other("mixed-other");
  std::string run, other_run;
  {
    const io::checkpoint_directory ckpt(dir.path), other_ckpt(other.path);
    run = ckpt.run_id();
    other_run = other_ckpt.run_id();
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [&](auto& rank) {
      save_model(rank, ckpt, 6, 1);
      save_model(rank, ckpt, 7, 1);
      save_model(rank, other_ckpt, 6, 1);
    });
  }
  REQUIRE(run != other_run);
  // A forger copies a file in and fixes the manifest's size, hash and checksum to match.
  const auto swap_in = [&](const fs::path& from, std::int64_t step) {
    const fs::path to = io::step_folder(dir.path, step) / "rank-1.safetensors";
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
    manifest_file manifest(dir.path, step);
    const io::file_digest digest = io::digest_file(to);
    manifest.json["files"][1]["bytes"] = digest.bytes;
    manifest.json["files"][1]["xxh64"] = io::to_hex(digest.xxh64);
    manifest.write(true);
  };
  SUBCASE("another run's file of the same step") {
    swap_in(io::step_folder(other.path, 6) / "rank-1.safetensors", 6);
    const std::string error = load_error(dir.path, 6);
    CHECK(contains(error, "step-00000006/rank-1.safetensors: belongs to run " + other_run +
                              " step 6, but the manifest is of run " + run + " step 6"));
    CHECK(contains(error, "files of two runs or steps mixed"));
  }
  SUBCASE("this run's file of another step") {
    swap_in(io::step_folder(dir.path, 7) / "rank-1.safetensors", 6);
    CHECK(contains(load_error(dir.path, 6), "rank-1.safetensors: belongs to run " + run +
                                                " step 7, but the manifest is of run " + run +
                                                " step 6"));
  }
}

TEST_CASE("a damaged newest checkpoint gives way to the newest valid one, with a warning") {
  scratch_folder dir("fallback");
  {
    const io::checkpoint_directory ckpt(dir.path);
    for (const std::int64_t step : {10, 20, 30})
      tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [&](auto& rank) {
        save_model(rank, ckpt, step, static_cast<std::uint64_t>(step));
      });
  }
  flip_a_bit(io::step_folder(dir.path, 30) / "rank-2.safetensors");
  manifest_file step20(dir.path, 20);
  step20.json["state"]["lr"] = 0.25;
  step20.write(false);

  std::ostringstream warnings;
  const io::checkpoint_reader newest = io::checkpoint_reader::open_newest_valid(dir.path, warnings);
  CHECK(newest.step() == 10);
  CHECK(contains(warnings.str(), "tpx: warning: skipping the checkpoint of step 30: "));
  CHECK(contains(warnings.str(), "step-00000030/rank-2.safetensors: checksum mismatch"));
  CHECK(contains(warnings.str(), "tpx: warning: skipping the checkpoint of step 20: "));
  CHECK(contains(warnings.str(), "step-00000020/manifest.json: manifest checksum mismatch"));
  CHECK(!contains(warnings.str(), ": tpx: "));  // one prefix per line
  CHECK(io::latest_step(dir.path) == 30);       // reading changes nothing on disk

  std::atomic<int> wrong{0};
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{1, 2}, [&](auto& rank) {
    io::checkpoint_reader in(dir.path);  // the same choice, warnings on stderr
    wrong += in.step() != 10;
    wrong +=
        wrong_blocks<Tensor<float, D<X>, F<Y>>, Tensor<float, F<Y>, D<X>>, Tensor<float, V<Y, X>>,
                     Tensor<float, D<>>, Tensor<bf16, D<X>, F<>>>(rank, in, 10);
  });
  CHECK(wrong == 0);

  SUBCASE("none valid: one error naming every failure") {
    flip_a_bit(io::step_folder(dir.path, 10) / "rank-0.safetensors");
    std::ostringstream ignored;
    const std::string error =
        error_of([&] { io::checkpoint_reader::open_newest_valid(dir.path, ignored); });
    CHECK(contains(error, dir.path.string() + ": no valid checkpoint: "));
    for (const char* failure : {"step-00000030/rank-2.safetensors: checksum mismatch",
                                "step-00000020/manifest.json: manifest checksum mismatch",
                                "step-00000010/rank-0.safetensors: checksum mismatch"})
      CHECK(contains(error, failure));
  }
  SUBCASE("latest itself damaged") {
    write_file(dir.path / "latest", bytes_of("garbage"));
    std::ostringstream notes;
    CHECK(io::checkpoint_reader::open_newest_valid(dir.path, notes).step() == 10);
    CHECK(contains(notes.str(), "latest: expected \"step-<number>\", found \"garbage\""));
  }
}

TEST_CASE("temporaries of killed writers are removed when the next writer takes the folder") {
  scratch_folder dir("orphans");
  {
    const io::checkpoint_directory ckpt(dir.path);
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [&](auto& rank) { save_model(rank, ckpt, 3, 1); });
  }
  const fs::path step3 = io::step_folder(dir.path, 3), step4 = io::step_folder(dir.path, 4);
  fs::create_directories(step4);
  write_file(step4 / "rank-0.safetensors.tmp.4242.0", bytes_of("half a file"));  // 11 bytes
  write_file(step3 / "manifest.json.tmp.4242.1", bytes_of("{\"format\":"));      // 10 bytes
  write_file(dir.path / "latest.tmp.4242.2", bytes_of("step-00000004\n"));       // 14 bytes
  std::ostringstream notices;
  const io::checkpoint_directory ckpt(dir.path, {.notices = &notices});
  CHECK(notices.str() == "tpx: " + dir.path.string() +
                             ": removed 3 temporary files of interrupted saves (35 bytes)\n");
  for (const auto& entry : fs::recursive_directory_iterator(dir.path))
    CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
  CHECK(load_error(dir.path, 3).empty());  // the checkpoint itself is untouched

  std::ostringstream nothing_to_do;
  const fs::path clean = dir.path / "clean";
  CHECK(error_of([&] { io::checkpoint_directory d(clean, {.notices = &nothing_to_do}); }).empty());
  CHECK(nothing_to_do.str().empty());
}

TEST_CASE("retention keeps the newest K complete checkpoints, 0 keeps all") {
  scratch_folder dir("retention");
  const auto folders = [&] {
    std::vector<std::int64_t> steps = io::step_folders(dir.path);
    std::sort(steps.begin(), steps.end());
    return steps;
  };
  {
    const io::checkpoint_directory keep_all(dir.path);
    for (const std::int64_t step : {1, 2, 3})
      tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [&](auto& rank) {
        save_model(rank, keep_all, step, static_cast<std::uint64_t>(step));
      });
    CHECK(folders() == std::vector<std::int64_t>{1, 2, 3});
  }
  fs::create_directories(io::step_folder(dir.path, 4));  // a save killed before its manifest
  const io::checkpoint_directory keep_two(dir.path, {.keep = 2});
  // The incomplete step 4 goes with the first save (older than the newest complete one).
  for (const auto& [step, left] : {std::pair{5, std::vector<std::int64_t>{3, 5}},
                                   std::pair{6, std::vector<std::int64_t>{5, 6}},
                                   std::pair{7, std::vector<std::int64_t>{6, 7}}}) {
    tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1}, [&, step = step](auto& rank) {
      save_model(rank, keep_two, step, static_cast<std::uint64_t>(step));
    });
    CHECK(folders() == left);
    CHECK(io::latest_step(dir.path) == step);
  }
  CHECK(load_error(dir.path, 6).empty());
  // A run that resumed from an older checkpoint saves below newer folders: those stay (they are
  // overwritten when it gets there), and so does what it just saved.
  tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 1},
            [&](auto& rank) { save_model(rank, keep_two, 5, 5); });
  CHECK(folders() == std::vector<std::int64_t>{5, 6, 7});
  CHECK(contains(error_of([&] { io::checkpoint_directory d(dir.path / "x", {.keep = -1}); }),
                 "cannot keep -1 checkpoints"));
}

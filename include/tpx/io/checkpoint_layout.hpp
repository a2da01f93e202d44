// The layout of a tpx checkpoint on disk, shared by its writer and its reader:
//
//   <dir>/lock                                  held (flock) by the one writer: directory_lock.hpp
//   <dir>/latest                                "step-00000040": the checkpoint completed last
//   <dir>/step-00000040/rank-<r>.safetensors    rank r's blocks of the tensors, one entry each
//   <dir>/step-00000040/manifest.json           the index, written last
//
// manifest.json is {"format": "tpx-checkpoint", "version": 2, "run_id": "<16 hex digits>",
//   "step": 40, "mesh": [{"axis": "X", "size": 2}, ...], "state": <the trainer's JSON>,
//   "files": [{"name": "rank-0.safetensors", "bytes": 1234, "xxh64": "<16 hex digits>"}, ...],
//   "tensors": {"w_in": {"dtype": "F32", "dims": ["D", "F"], "notation": "[D_X, F_Y]",
//                        "global_shape": [16, 32],
//                        "blocks": [{"file": 0, "offsets": [0, 0], "extents": [8, 16]}, ...]}},
//   "manifest_xxh64": "<16 hex digits>"}
// manifest_xxh64 is the XXH64 of the manifest's canonical bytes: the compact JSON (keys sorted,
// as nlohmann::json::dump writes it) of the manifest without manifest_xxh64; a reader refuses a
// manifest whose bytes changed (manifest_checksum). run_id names the run that wrote the
// checkpoint (checkpoint_directory.hpp); every rank file repeats it and the step in its
// safetensors __metadata__ ("tpx.run_id", "tpx.step"), and a reader refuses a file of another
// run or step, so files of two runs never combine.
// A block is a box of the global tensor, [offsets, offsets + extents) along each dim, stored
// row-major as the entry of that name in the file; the blocks of a tensor tile it exactly. Each
// rank file repeats, in its safetensors __metadata__, its blocks' place in the global tensor
// ({"w_in": "{\"global_shape\":[16,32],\"offsets\":[0,0],...}"}), so one file makes sense to a
// Python user on its own. While a checkpoint is being written, each rank also leaves
// rank-<r>.json, its part of the manifest; rank 0 merges them into manifest.json and removes them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tpx/core/compile_error.hpp"
#include "tpx/io/atomic_file.hpp"
#include "tpx/io/checksum.hpp"
#include "tpx/io/io_error.hpp"
#include "tpx/io/safetensors.hpp"
#include "tpx/tensor/box_copy.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::io {

inline constexpr const char* checkpoint_format = "tpx-checkpoint";
inline constexpr int checkpoint_version = 2;
// The keys of a rank file's __metadata__ that say which run and step the file belongs to.
inline constexpr const char* run_id_metadata_key = "tpx.run_id";
inline constexpr const char* step_metadata_key = "tpx.step";
inline constexpr const char* manifest_checksum_key = "manifest_xxh64";

inline std::string step_name(std::int64_t step) {
  char text[32];
  std::snprintf(text, sizeof text, "step-%08lld", static_cast<long long>(step));
  return text;
}
inline std::filesystem::path step_folder(const std::filesystem::path& dir, std::int64_t step) {
  return dir / step_name(step);
}
inline std::string rank_file_name(int rank) {
  return "rank-" + std::to_string(rank) + ".safetensors";
}
inline std::string rank_record_name(int rank) { return "rank-" + std::to_string(rank) + ".json"; }

inline std::string read_text_file(const std::filesystem::path& path) {
  std::error_code error;
  const std::uint64_t size = std::filesystem::file_size(path, error);
  if (error) throw io_error("tpx: " + path.string() + ": cannot read: " + error.message());
  std::string text(size, '\0');
  read_file_range(path, 0, std::as_writable_bytes(std::span(text)));
  return text;
}

// The step a folder name "step-<number>" names, or nothing if it is not such a name.
inline std::optional<std::int64_t> parse_step_name(const std::string& text) {
  long long step = -1;
  int used = 0;
  if (std::sscanf(text.c_str(), "step-%lld%n", &step, &used) != 1 || step < 0 ||
      text.find_first_not_of("\n", static_cast<std::size_t>(used)) != std::string::npos)
    return std::nullopt;
  return step;
}

// The steps of the "step-<number>" folders under dir, in no particular order.
inline std::vector<std::int64_t> step_folders(const std::filesystem::path& dir) {
  std::vector<std::int64_t> steps;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (const auto step = parse_step_name(entry.path().filename().string());
        step && entry.is_directory())
      steps.push_back(*step);
  return steps;
}

// Of those, the ones that hold a manifest (written last: the checkpoint was completed).
inline std::vector<std::int64_t> complete_steps(const std::filesystem::path& dir) {
  std::vector<std::int64_t> steps = step_folders(dir);
  std::erase_if(steps, [&](std::int64_t step) {
    return !std::filesystem::exists(step_folder(dir, step) / "manifest.json");
  });
  return steps;
}

// The XXH64 of a manifest's canonical bytes: its compact JSON without manifest_xxh64.
inline std::uint64_t manifest_checksum(nlohmann::json manifest) {
  manifest.erase(manifest_checksum_key);
  const std::string canonical = manifest.dump();
  xxh64_stream hash;
  hash.update(std::as_bytes(std::span(canonical)));
  return hash.digest();
}

// The step that <dir>/latest names (the checkpoint completed last), or nothing if dir holds no
// complete checkpoint yet.
inline std::optional<std::int64_t> latest_step(const std::filesystem::path& dir) {
  const std::filesystem::path latest = dir / "latest";
  if (!std::filesystem::exists(latest)) return std::nullopt;
  const std::string text = read_text_file(latest);
  const std::optional<std::int64_t> step = parse_step_name(text);
  if (!step)
    throw io_error("tpx: " + latest.string() + ": expected \"step-<number>\", found \"" + text +
                   "\"");
  return step;
}

// Points <dir>/latest at step (atomically: readers see the old step or the new one).
inline void set_latest_step(const std::filesystem::path& dir, std::int64_t step) {
  const std::string text = step_name(step) + "\n";
  write_atomically(dir / "latest",
                   [&](file_sink& out) { out.write(std::as_bytes(std::span(text))); });
}

// A partial sum has no single value per element, so there is nothing to save: reduce it first.
template <class Tn>
constexpr void check_checkpointable() {
  if constexpr (!std::is_same_v<typename Tn::unreduced, Unreduced<>>)
    compile_error<"tpx: checkpoint: tensor " + Tn::notation +
                  " is unreduced (a partial sum); reduce it before saving or loading it">{};
}

// The names of a tensor type's dims, in order: ["D", "F"].
template <class Tn>
std::vector<std::string> dim_names() {
  return []<class... Dims>(type_list<Dims...>) {
    return std::vector<std::string>{std::string(Dims::name.c_str())...};
  }(typename Tn::dims{});
}

// What a checkpoint records about a tensor besides its blocks.
template <class Space, class T, class... Spec>
nlohmann::json describe_tensor(const BasicTensor<Space, T, Spec...>& t) {
  using Tn = BasicTensor<Space, T, Spec...>;
  return {{"dtype", dtype_name(dtype_of<T>)},
          {"dims", dim_names<Tn>()},
          {"notation", Tn::notation.c_str()},
          {"global_shape",
           std::vector<std::int64_t>(t.global_extents().begin(), t.global_extents().end())}};
}

// A tensor's blocks along its first dim, each saved as a tensor of its own
// (checkpoint_writer::add_blocks, checkpoint_reader::load_blocks): their global shape (the
// tensor's without its first dim), the box of each that this rank holds, and its elements.
template <std::size_t N>
struct blocks_along_first_dim {
  index_array<N> global{}, offsets{}, extents{};
  std::int64_t elements = 1;

  template <class Tn>
  explicit blocks_along_first_dim(const Tn& t) {
    for (std::size_t d = 0; d < N; ++d) {
      global[d] = t.global_extent(d + 1);
      offsets[d] = t.local_offset(d + 1);
      extents[d] = t.local_extent(d + 1);
      elements *= extents[d];
    }
  }
  // describe_tensor of each block, a tensor of `type` with dims `dims` written `notation`.
  nlohmann::json description(dtype type, const char* notation,
                             const std::vector<std::string>& dims) const {
    return {{"dtype", dtype_name(type)},
            {"dims", dims},
            {"notation", notation},
            {"global_shape", std::vector<std::int64_t>(global.begin(), global.end())}};
  }
};
template <class Tn>
blocks_along_first_dim(const Tn&) -> blocks_along_first_dim<Tn::order - 1>;

}  // namespace tpx::io

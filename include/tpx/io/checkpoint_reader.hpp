// checkpoint_reader: fills a tensor's block from a checkpoint saved on any mesh, in any sharding.
//
//   tpx::io::checkpoint_reader ckpt("ckpt");          // the newest valid checkpoint
//   auto w_in = tpx::zeros<float, D<X>, F<Y>>(rank, {D(16), F(32)});
//   ckpt.load("w_in", w_in);                          // this rank's block, whatever the old mesh
//   ckpt.load_blocks(layer_name, stack);              // block s of stack from layer_name(s)
//   const std::int64_t step = ckpt.step();  const nlohmann::json& state = ckpt.state();
//
// A tensor's elements are stored as blocks (boxes of the global tensor) in the rank files; the
// manifest lists them. load() intersects the box this rank holds (local_offsets, local_extents)
// with every stored block and copies each overlap, so the same checkpoint loads onto 2x2, 4x1
// or 1x1, into [D_X, F_Y] or [D, F]: only the global shape, the dims (by name, in order) and the
// dtype must match, and a mismatch is an io_error naming the tensor, what this program expects
// and what the checkpoint has. Same mesh and sharding: every element is the bit pattern saved.
//
// Nothing is trusted that does not check out: the manifest's own checksum, every value it holds
// (file names, block boxes), and of every file its size and XXH64, its run id and step (those of
// the manifest: files of two runs never combine) and each block's place as the file records it;
// a failure is an io_error naming the file. Reading the latest checkpoint verifies all of it
// first, and if the checkpoint latest names is damaged, falls back to the newest earlier one
// that checks out, with a warning naming what was wrong (open_newest_valid). Reading a given
// step verifies lazily: only the files that hold an overlapping block are touched, each verified
// once and its header checked, and of a block only the rows (outermost dim) that overlap are
// read. Loading needs no communication: each rank reads what it needs on its own. Files are read
// through host memory and moved to the tensor's memory space with Space::from_host.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tpx/io/atomic_file.hpp"
#include "tpx/io/checkpoint_layout.hpp"
#include "tpx/io/io_error.hpp"
#include "tpx/io/json_integer.hpp"
#include "tpx/io/safetensors.hpp"
#include "tpx/tensor/box_copy.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::io {

class checkpoint_reader {
 public:
  // The newest valid checkpoint under dir (open_newest_valid), warnings on stderr.
  explicit checkpoint_reader(const std::filesystem::path& dir)
      : checkpoint_reader(open_newest_valid(dir, std::cerr)) {}

  // The checkpoint that <dir>/latest names, wholly verified; if it is damaged or missing, the
  // newest earlier complete checkpoint that verifies, after a line on `warnings` saying what was
  // wrong with each one skipped. An io_error listing every failure if none is valid, or if dir
  // holds no checkpoint.
  static checkpoint_reader open_newest_valid(const std::filesystem::path& dir,
                                             std::ostream& warnings) {
    std::optional<std::int64_t> latest;
    std::string failures;
    try {
      latest = latest_step(dir);
      if (!latest)
        throw io_error("tpx: " + dir.string() + ": holds no checkpoint (no 'latest' file)");
    } catch (const io_error& e) {
      if (!std::filesystem::exists(dir) || complete_steps(dir).empty()) throw;
      failures = reason(e);
      warnings << "tpx: warning: " << failures << "; looking for the newest valid checkpoint\n";
    }
    std::vector<std::int64_t> candidates = complete_steps(dir);
    if (latest) {
      std::erase_if(candidates, [&](std::int64_t s) { return s >= *latest; });
      candidates.push_back(*latest);
    }
    std::sort(candidates.begin(), candidates.end(), std::greater<>());
    for (const std::int64_t step : candidates) {
      try {
        checkpoint_reader in(dir, step);
        in.verify_files();
        return in;
      } catch (const io_error& e) {
        failures += std::string(failures.empty() ? "" : "; ") + reason(e);
        warnings << "tpx: warning: skipping the checkpoint of step " << step << ": " << reason(e)
                 << "\n";
      }
    }
    throw io_error("tpx: " + dir.string() + ": no valid checkpoint: " + failures);
  }

  // The checkpoint of the given step under dir.
  checkpoint_reader(const std::filesystem::path& dir, std::int64_t step)
      : folder_(step_folder(dir, step)) {
    const std::filesystem::path path = folder_ / "manifest.json";
    if (!std::filesystem::exists(path))
      throw io_error("tpx: " + path.string() + ": missing: step " + std::to_string(step) +
                     " was never completely saved");
    try {
      manifest_ = nlohmann::json::parse(read_text_file(path));
      if (manifest_.at("format") != checkpoint_format ||
          manifest_.at("version") != checkpoint_version || manifest_.at("step") != step ||
          !manifest_.contains("state") || !manifest_.at("run_id").is_string())
        throw io_error("tpx: " + path.string() + ": not a version-" +
                       std::to_string(checkpoint_version) + " tpx checkpoint manifest of step " +
                       std::to_string(step));
      const std::uint64_t recorded =
          parse_hex(manifest_.at(manifest_checksum_key).get<std::string>(), path);
      if (recorded != manifest_checksum(manifest_))
        throw io_error("tpx: " + path.string() + ": manifest checksum mismatch: it records xxh64 " +
                       to_hex(recorded) + ", its contents hash to " +
                       to_hex(manifest_checksum(manifest_)) +
                       " (the manifest was edited or damaged after it was written)");
      for (const nlohmann::json& f : manifest_.at("files")) {
        const std::string name = f.at("name").get<std::string>();
        if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
          throw io_error("tpx: " + path.string() + ": file name \"" + name +
                         "\" is not a name inside the checkpoint's folder");
        files_.push_back({name,
                          {json_integer<std::uint64_t>(f.at("bytes"), "a file's bytes", path),
                           parse_hex(f.at("xxh64").get<std::string>(), path)},
                          std::nullopt});
      }
      for (const auto& [name, t] : manifest_.at("tensors").items())
        tensors_[name] = parse_tensor(t, path);
    } catch (const nlohmann::json::exception& e) {
      throw io_error("tpx: " + path.string() +
                     ": not a valid tpx checkpoint manifest: " + e.what());
    }
  }

  std::int64_t step() const { return manifest_["step"].get<std::int64_t>(); }
  // The run that wrote the checkpoint (checkpoint_directory::run_id).
  std::string run_id() const { return manifest_["run_id"].get<std::string>(); }
  // The JSON the trainer passed to checkpoint_writer::save.
  const nlohmann::json& state() const { return manifest_["state"]; }
  const nlohmann::json& manifest() const { return manifest_; }

  // Verifies every file of the checkpoint now (what load does lazily, file by file).
  void verify_files() {
    for (std::size_t i = 0; i < files_.size(); ++i) file(static_cast<int>(i));
  }

  // Fills t's block with the elements of the saved tensor `name`.
  template <class Space, class T, class... Spec>
  void load(const std::string& name, BasicTensor<Space, T, Spec...>& t) {
    using Tn = BasicTensor<Space, T, Spec...>;
    check_checkpointable<Tn>();
    std::vector<T> staging(t.size());
    fill_block(name, describe_tensor(t), Tn::notation.c_str(), t.local_offsets(), t.local_extents(),
               staging);
    Space::from_host(t.context(), staging.data(), staging.size(), t.data());
  }

  // Fills each block of t along its first dim from the saved tensor name_of(i), i the block's
  // global index on that dim (checkpoint_writer::add_blocks saved them so): a stack of layers
  // [S_P, D_X, F_Y] loaded from the layers [D, F] saved on any number of stages, or by a model
  // that keeps its layers apart. A block name_of maps to "" keeps its elements.
  template <class Space, class T, class First, class... Rest, class NameOf>
  void load_blocks(const NameOf& name_of, BasicTensor<Space, T, First, Rest...>& t) {
    using Tn = BasicTensor<Space, T, First, Rest...>;
    using Block = BasicTensor<Space, T, Rest...>;
    check_checkpointable<Tn>();
    const blocks_along_first_dim along(t);
    std::vector<T> staging(static_cast<std::size_t>(along.elements));
    for (std::int64_t i = 0; i < t.local_extent(0); ++i) {
      const std::string name = name_of(t.local_offset(0) + i);
      if (name.empty()) continue;
      fill_block(name, along.description(dtype_of<T>, Block::notation.c_str(), dim_names<Block>()),
                 Block::notation.c_str(), along.offsets, along.extents, staging);
      Space::from_host(t.context(), staging.data(), staging.size(), t.data() + i * along.elements);
    }
  }

 private:
  // An error's message without its "tpx: ", for a sentence that already has one.
  static std::string reason(const io_error& e) {
    const std::string what = e.what();
    return what.starts_with("tpx: ") ? what.substr(5) : what;
  }

  struct stored_block {
    int file = 0;
    std::vector<std::int64_t> offsets, extents;
  };
  struct stored_tensor {
    nlohmann::json description;  // dtype, dims, notation, global_shape
    std::vector<stored_block> blocks;
  };
  struct stored_file {
    std::string name;
    file_digest digest;
    std::optional<safetensors_header> header;  // read (and the file verified) on first use
  };

  static std::uint64_t parse_hex(const std::string& text, const std::filesystem::path& path) {
    if (text.size() != 16 || text.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw io_error("tpx: " + path.string() + ": \"" + text +
                     "\" is not an xxh64 of 16 hex digits");
    return std::stoull(text, nullptr, 16);
  }

  stored_tensor parse_tensor(const nlohmann::json& t, const std::filesystem::path& path) const {
    stored_tensor s{{{"dtype", t.at("dtype")},
                     {"dims", t.at("dims")},
                     {"notation", t.at("notation")},
                     {"global_shape", t.at("global_shape")}},
                    {}};
    const auto global = json_integers<std::int64_t>(t.at("global_shape"), "global_shape", path);
    for (const nlohmann::json& b : t.at("blocks")) {
      stored_block block{json_integer<int>(b.at("file"), "a block's file", path),
                         json_integers<std::int64_t>(b.at("offsets"), "a block's offsets", path),
                         json_integers<std::int64_t>(b.at("extents"), "a block's extents", path)};
      bool inside = block.file >= 0 && block.file < static_cast<int>(files_.size()) &&
                    block.offsets.size() == global.size() && block.extents.size() == global.size();
      // offsets + extents <= global, written so that no sum can overflow.
      for (std::size_t d = 0; inside && d < global.size(); ++d)
        inside = block.offsets[d] >= 0 && block.extents[d] >= 0 && block.extents[d] <= global[d] &&
                 block.offsets[d] <= global[d] - block.extents[d];
      if (!inside)
        throw io_error("tpx: " + path.string() + ": block " + b.dump() +
                       " lies outside its tensor or names no file");
      s.blocks.push_back(std::move(block));
    }
    return s;
  }

  const stored_tensor& find(const std::string& name) const {
    const auto it = tensors_.find(name);
    if (it != tensors_.end()) return it->second;
    std::string names;
    for (const auto& [n, _] : tensors_) names += (names.empty() ? "" : ", ") + n;
    throw io_error("tpx: checkpoint " + folder_.string() + ": has no tensor '" + name +
                   "' (it has: " + names + ")");
  }

  // The header of file i, after checking the file against the manifest (once).
  const safetensors_header& file(int i) {
    stored_file& f = files_[static_cast<std::size_t>(i)];
    if (!f.header) {
      verify_file(folder_ / f.name, f.digest);
      safetensors_header header = read_safetensors_header(folder_ / f.name);
      check_belongs_here(header);
      f.header = std::move(header);
    }
    return *f.header;
  }

  // Throws, naming the file, unless it records the manifest's run id and step.
  void check_belongs_here(const safetensors_header& header) const {
    const auto recorded = [&](const char* key) {
      const auto it = header.metadata.find(key);
      return it == header.metadata.end() ? std::string("none") : it->second;
    };
    const std::string run = recorded(run_id_metadata_key), step = recorded(step_metadata_key);
    if (run != run_id() || step != std::to_string(this->step()))
      throw io_error("tpx: " + header.file.string() + ": belongs to run " + run + " step " + step +
                     ", but the manifest is of run " + run_id() + " step " +
                     std::to_string(this->step()) + " (files of two runs or steps mixed)");
  }

  // Throws, naming the file, unless the file places its entry `name` where the manifest does.
  static void check_placement(const safetensors_header& header, const std::string& name,
                              const stored_block& b) {
    const auto it = header.metadata.find(name);
    const nlohmann::json where = nlohmann::json::parse(
        it == header.metadata.end() ? std::string("{}") : it->second, nullptr, false);
    if (!where.is_object() || where.value("offsets", nlohmann::json()) != nlohmann::json(b.offsets))
      throw io_error("tpx: " + header.file.string() + ": tensor '" + name +
                     "': the file places its block at offsets " +
                     (where.is_object() ? where.value("offsets", nlohmann::json()).dump()
                                        : std::string("(none)")) +
                     ", the manifest at " + nlohmann::json(b.offsets).dump());
  }

  // Fills staging, laid out as the block [offsets, offsets + extents) of the saved tensor
  // `name`, whose dtype, dims and global shape must be `expected`'s (`notation`: the tensor's,
  // for the error).
  template <class T, std::size_t N>
  void fill_block(const std::string& name, const nlohmann::json& expected, const char* notation,
                  const index_array<N>& offsets, const index_array<N>& extents,
                  std::vector<T>& staging) {
    const stored_tensor& saved = find(name);
    for (const char* key : {"dtype", "dims", "global_shape"})
      if (expected[key] != saved.description[key])
        throw io_error("tpx: checkpoint " + folder_.string() + ": tensor '" + name +
                       "': the tensor " + notation + " loaded into has " + key + " " +
                       expected[key].dump() + ", the checkpoint has " +
                       saved.description[key].dump());
    std::int64_t filled = 0;
    std::vector<const stored_block*> used;
    for (const stored_block& b : saved.blocks) {
      index_array<N> lo{}, box{};
      bool overlaps = true;
      for (std::size_t d = 0; d < N; ++d) {
        lo[d] = std::max(b.offsets[d], offsets[d]);
        box[d] = std::min(b.offsets[d] + b.extents[d], offsets[d] + extents[d]) - lo[d];
        overlaps = overlaps && box[d] > 0;
      }
      const bool repeated = std::any_of(used.begin(), used.end(), [&](const stored_block* u) {
        return u->offsets == b.offsets && u->extents == b.extents;
      });
      if (!overlaps || repeated) continue;
      used.push_back(&b);
      copy_overlap(name, b, lo, box, offsets, extents, staging);
      filled += element_count(box);
    }
    if (filled != static_cast<std::int64_t>(staging.size()))
      throw io_error("tpx: checkpoint " + folder_.string() + ": tensor '" + name +
                     "': its blocks hold " + std::to_string(filled) + " of the " +
                     std::to_string(staging.size()) + " elements of this rank's block");
  }

  // Copies the box [lo, lo + box) of the global tensor from stored block b into staging, which is
  // laid out as the block [offsets, offsets + extents). Reads only the rows of b's outermost dim
  // that the box spans.
  template <class T, std::size_t N>
  void copy_overlap(const std::string& name, const stored_block& b, const index_array<N>& lo,
                    const index_array<N>& box, const index_array<N>& offsets,
                    const index_array<N>& extents, std::vector<T>& staging) {
    const safetensors_header& header = file(b.file);
    const tensor_info& info = header.tensor(name);
    check_placement(header, name, b);
    if (info.shape != b.extents)
      throw io_error("tpx: " + header.file.string() + ": tensor '" + name + "' has shape " +
                     nlohmann::json(info.shape).dump() + " but the manifest says " +
                     nlohmann::json(b.extents).dump());
    index_array<N> rows_shape{}, src_start{}, dst_start{};
    std::int64_t row = 1;  // elements per index of the outermost dim
    for (std::size_t d = 0; d < N; ++d) {
      rows_shape[d] = d == 0 ? box[0] : b.extents[d];
      src_start[d] = d == 0 ? 0 : lo[d] - b.offsets[d];
      dst_start[d] = lo[d] - offsets[d];
      if (d > 0) row *= b.extents[d];
    }
    std::int64_t first_row = 0;
    if constexpr (N > 0) first_row = lo[0] - b.offsets[0];
    std::vector<T> rows(static_cast<std::size_t>(element_count(rows_shape)));
    read_elements(header, info, static_cast<std::uint64_t>(first_row * row), std::span(rows));
    copy_box(rows.data(), rows_shape, src_start, staging.data(), extents, dst_start, box);
  }

  std::filesystem::path folder_;
  nlohmann::json manifest_;
  std::vector<stored_file> files_;
  std::map<std::string, stored_tensor> tensors_;
};

}  // namespace tpx::io

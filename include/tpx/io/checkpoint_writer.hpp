// checkpoint_writer: every rank saves its blocks of the training state; rank 0 indexes them.
//
//   tpx::io::checkpoint_directory dir("ckpt", {.keep = 3});  // once per run (locks the folder)
//   tpx::io::checkpoint_writer ckpt(rank, dir, step);
//   ckpt.add("w_in", w_in);                // any reduced tensor: its block is copied to host now
//   ckpt.add("adam.m.w_in", m_in);
//   ckpt.add_blocks(layer_name, stack);   // [S_P, D_X, F_Y]: block s saved as layer_name(s)
//   ckpt.save({{"data_position", pos}});   // collective: every rank of the mesh calls it
//
// save() writes rank r's blocks to step-<S>/rank-<r>.safetensors and its part of the manifest to
// rank-<r>.json, each atomically (atomic_file.hpp); waits for every rank (a barrier over the
// whole mesh); then rank 0 merges the parts into manifest.json, with each file's size and XXH64,
// points <dir>/latest at the step, deletes the checkpoints beyond the directory's `keep`, and all
// ranks wait once more, so that when save() returns the checkpoint is complete and durable
// everywhere. A crash at any point leaves <dir>/latest on the previous complete checkpoint. Every
// file records the directory's run id and the step; the manifest carries its own checksum. The
// layout is described in checkpoint_layout.hpp.
//
// Memory: add() copies the block to host memory once (a device tensor has to come to the host to
// be written; a host tensor is copied too, because add() also takes temporaries), and save()
// writes from those copies without another one: the writer holds one host copy of this rank's
// blocks, freed when it is destroyed.
//
// A block replicated over some mesh axes is held by several ranks; only the one at coordinate 0
// on each of those axes writes it, so a checkpoint stores every element once. Rank 0 checks that
// the ranks agree on each tensor's shape, dims and dtype, and that the blocks written tile the
// whole tensor (a rank that forgot an add() is caught here, not at load time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tpx/comm/any_communicator.hpp"
#include "tpx/io/atomic_file.hpp"
#include "tpx/io/checkpoint_directory.hpp"
#include "tpx/io/checkpoint_layout.hpp"
#include "tpx/io/io_error.hpp"
#include "tpx/io/safetensors.hpp"
#include "tpx/spmd/rank.hpp"
#include "tpx/tensor/tensor.hpp"

namespace tpx::io {

class checkpoint_writer {
 public:
  // A checkpoint of step `step` under dir, written by this rank of the mesh.
  template <class MeshT>
  checkpoint_writer(const Rank<MeshT>& rank, const checkpoint_directory& dir, std::int64_t step)
      : rank_(&rank),
        mesh_(&[&]<class... Axes>(type_list<Axes...>) -> any_communicator& {
          return rank.template group<Axes...>();
        }(typename MeshT::axes{})),
        directory_(&dir),
        step_(step) {
    if (step < 0)
      throw std::invalid_argument("tpx: checkpoint step " + std::to_string(step) + " is negative");
  }

  // Records t's block under name (unique among this rank's adds), copying it to host memory.
  template <class Space, class T, class... Spec>
  void add(const std::string& name, const BasicTensor<Space, T, Spec...>& t) {
    using Tn = BasicTensor<Space, T, Spec...>;
    check_checkpointable<Tn>();
    claim(name);
    if (!holds_first_copy(t.context(), typename Tn::traits::axes{})) return;
    block b{name, dtype_of<T>, describe_tensor(t), std::vector<std::byte>(t.size() * sizeof(T))};
    b.record["offsets"] =
        std::vector<std::int64_t>(t.local_offsets().begin(), t.local_offsets().end());
    b.record["extents"] =
        std::vector<std::int64_t>(t.local_extents().begin(), t.local_extents().end());
    Space::to_host(t.context(), t.data(), t.size(), reinterpret_cast<T*>(b.bytes.data()));
    blocks_.push_back(std::move(b));
  }

  // Records each block of t along its first dim as a tensor of its own, under name_of(i) for the
  // block at global index i of that dim (a block name_of maps to "" is left out): a stack of
  // layers [S_P, D_X, F_Y], each stage's layer a block, saved as the layers [D, F] they are, so
  // that they load onto any number of stages (checkpoint_reader::load_blocks), or into a model
  // that keeps its layers apart (load). Ranks that hold different blocks add different names.
  template <class Space, class T, class First, class... Rest, class NameOf>
  void add_blocks(const NameOf& name_of, const BasicTensor<Space, T, First, Rest...>& t) {
    using Tn = BasicTensor<Space, T, First, Rest...>;
    using Block = BasicTensor<Space, T, Rest...>;
    check_checkpointable<Tn>();
    const blocks_along_first_dim along(t);
    for (std::int64_t i = 0; i < t.local_extent(0); ++i) {
      const std::string name = name_of(t.local_offset(0) + i);
      if (name.empty()) continue;
      claim(name);
      if (!holds_first_copy(t.context(), typename Tn::traits::axes{})) continue;
      block b{name, dtype_of<T>,
              along.description(dtype_of<T>, Block::notation.c_str(), dim_names<Block>()),
              std::vector<std::byte>(static_cast<std::size_t>(along.elements) * sizeof(T))};
      b.record["offsets"] = std::vector<std::int64_t>(along.offsets.begin(), along.offsets.end());
      b.record["extents"] = std::vector<std::int64_t>(along.extents.begin(), along.extents.end());
      Space::to_host(t.context(), t.data() + i * along.elements,
                     static_cast<std::size_t>(along.elements),
                     reinterpret_cast<T*>(b.bytes.data()));
      blocks_.push_back(std::move(b));
    }
  }

  // Writes the checkpoint (collective); state is free-form JSON kept in the manifest: data
  // position, hyper-parameters, optimizer step counts.
  void save(const nlohmann::json& state = nlohmann::json::object()) {
    const std::filesystem::path folder = step_folder(directory_->path(), step_);
    std::error_code error;
    std::filesystem::create_directories(folder, error);
    if (error) throw io_error("tpx: " + folder.string() + ": cannot create: " + error.message());
    const int r = rank_->world_rank();

    std::vector<tensor_bytes> tensors;
    metadata_map placement;
    nlohmann::json records = nlohmann::json::object();
    for (const block& b : blocks_) {
      tensors.push_back(
          {b.name, b.type, b.record["extents"].get<std::vector<std::int64_t>>(), b.bytes});
      nlohmann::json where = b.record;
      where.erase("extents");
      where.erase("dtype");
      placement[b.name] = where.dump();
      records[b.name] = b.record;
    }
    placement[run_id_metadata_key] = directory_->run_id();
    placement[step_metadata_key] = std::to_string(step_);
    const file_digest digest = write_atomically(folder / rank_file_name(r), [&](file_sink& out) {
      write_safetensors(out, tensors, placement);
    });
    const std::string part = nlohmann::json{
        {"file",
         {{"name", rank_file_name(r)}, {"bytes", digest.bytes}, {"xxh64", to_hex(digest.xxh64)}}},
        {"tensors", records}}.dump();
    write_atomically(folder / rank_record_name(r),
                     [&](file_sink& out) { out.write(std::as_bytes(std::span(part))); });
    mesh_->barrier();
    if (r == 0) publish(folder, state);
    mesh_->barrier();
  }

 private:
  struct block {
    std::string name;
    dtype type;
    nlohmann::json record;  // describe_tensor, and the block's offsets and extents
    std::vector<std::byte> bytes;
  };

  // Takes `name` for a tensor of this rank's: not tpx's, not added before.
  void claim(const std::string& name) {
    if (name.starts_with("tpx."))
      throw std::invalid_argument("tpx: checkpoint: tensor name '" + name +
                                  "' is reserved (names starting with \"tpx.\" are tpx's own)");
    if (!names_.insert(name).second)
      throw std::invalid_argument("tpx: checkpoint: tensor '" + name + "' is added twice");
  }

  // Whether this rank is the one that writes its block: coordinate 0 on every mesh axis that
  // does not shard the tensor.
  template <class... TensorAxes>
  static bool holds_first_copy(const rank_context& context, type_list<TensorAxes...>) {
    for (const axis_place& a : context.axes())
      if (a.coord != 0 && ((a.key != &axis_key<TensorAxes>)&&...)) return false;
    return true;
  }

  // Rank 0: merges the ranks' parts into manifest.json and points latest at this step.
  void publish(const std::filesystem::path& folder, const nlohmann::json& state) const {
    nlohmann::json files = nlohmann::json::array();
    nlohmann::json tensors = nlohmann::json::object();
    for (int r = 0; r < rank_->world_size(); ++r) {
      const nlohmann::json part =
          nlohmann::json::parse(read_text_file(folder / rank_record_name(r)));
      files.push_back(part["file"]);
      for (const auto& [name, record] : part["tensors"].items()) {
        nlohmann::json description = record;
        description.erase("offsets");
        description.erase("extents");
        nlohmann::json& entry = tensors[name];
        if (entry.is_null()) {
          entry = description;
          entry["blocks"] = nlohmann::json::array();
        }
        for (const auto& [key, value] : description.items())
          if (entry[key] != value)
            throw io_error("tpx: checkpoint " + folder.string() + ": tensor '" + name + "' has " +
                           key + " " + entry[key].dump() + " on rank " +
                           entry["blocks"][0]["file"].dump() + " but " + value.dump() +
                           " on rank " + std::to_string(r));
        entry["blocks"].push_back(
            {{"file", r}, {"offsets", record["offsets"]}, {"extents", record["extents"]}});
      }
    }
    for (const auto& [name, entry] : tensors.items()) check_tiling(folder, name, entry);
    nlohmann::json mesh = nlohmann::json::array();
    for (const axis_place& a : rank_->axes()) mesh.push_back({{"axis", a.name}, {"size", a.size}});
    nlohmann::json manifest{{"format", checkpoint_format},
                            {"version", checkpoint_version},
                            {"run_id", directory_->run_id()},
                            {"step", step_},
                            {"mesh", mesh},
                            {"state", state},
                            {"files", files},
                            {"tensors", tensors}};
    manifest[manifest_checksum_key] = to_hex(manifest_checksum(manifest));
    const std::string text = one_entry_per_line(manifest);
    write_atomically(folder / "manifest.json",
                     [&](file_sink& out) { out.write(std::as_bytes(std::span(text))); });
    set_latest_step(directory_->path(), step_);
    directory_->retain(step_);
    for (int r = 0; r < rank_->world_size(); ++r)
      std::filesystem::remove(folder / rank_record_name(r));
  }

  // JSON with each member of the top-level object, and each element or member of those, on a
  // line of its own: a manifest reads as one line per file and per tensor.
  static std::string one_entry_per_line(const nlohmann::json& object) {
    std::string text = "{";
    const char* separator = "\n ";
    for (const auto& [key, value] : object.items()) {
      text += separator + nlohmann::json(key).dump() + ": ";
      separator = ",\n ";
      if (!value.is_structured() || value.empty()) {
        text += value.dump();
        continue;
      }
      const char* inner = "\n  ";
      text += value.is_object() ? "{" : "[";
      for (const auto& [k, v] : value.items()) {
        text += inner + (value.is_object() ? nlohmann::json(k).dump() + ": " : "") + v.dump();
        inner = ",\n  ";
      }
      text += value.is_object() ? "\n }" : "\n ]";
    }
    return text + "\n}\n";
  }

  // The blocks written (disjoint by construction) must hold every element of the tensor.
  static void check_tiling(const std::filesystem::path& folder, const std::string& name,
                           const nlohmann::json& entry) {
    std::uint64_t stored = 0, total = 1;
    for (const nlohmann::json& e : entry["global_shape"]) total *= e.get<std::uint64_t>();
    for (const nlohmann::json& b : entry["blocks"]) {
      std::uint64_t n = 1;
      for (const nlohmann::json& e : b["extents"]) n *= e.get<std::uint64_t>();
      stored += n;
    }
    if (stored != total)
      throw io_error("tpx: checkpoint " + folder.string() + ": tensor '" + name + "' has " +
                     std::to_string(total) + " elements but the ranks saved blocks of " +
                     std::to_string(stored) + " (did every rank add it?)");
  }

  const rank_context* rank_;
  any_communicator* mesh_;
  const checkpoint_directory* directory_;
  std::int64_t step_;
  std::set<std::string> names_;
  std::vector<block> blocks_;
};

}  // namespace tpx::io

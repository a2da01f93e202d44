// safetensors: the file format of tpx checkpoints, readable by Python's `safetensors.safe_open`.
//
// The format (https://huggingface.co/docs/safetensors) is: 8 bytes, a little-endian u64 N; N
// bytes of UTF-8 JSON, {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
// ..., "__metadata__": {"key": "value", ...}}; then the byte buffer, in which every tensor's
// elements lie row-major and little-endian at [begin, end) counted from the buffer's start.
// write_safetensors writes what the reference implementation writes: "__metadata__" first, then
// the tensors ordered by decreasing element size and then by name, packed without gaps, each entry
// with its keys in the order dtype, shape, data_offsets, and the JSON padded with spaces to a
// multiple of 8 bytes so that every tensor starts aligned to its element size.
//
// read_safetensors_header treats the file as untrusted and checks what the reference reader
// checks: the header length against the file and its 100 MB limit, JSON that starts with '{' and
// has no duplicate keys, each tensor's byte count against its shape and dtype (without
// overflow), data_offsets that tile the byte buffer exactly (no overlap, no gap) and end where
// the file ends. Each failure is an io_error naming the file and, where one is involved, the
// tensor. tpx stores F32 and BF16 (tpx::bf16) elements; other dtypes are rejected by name.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "tpx/core/bfloat16.hpp"
#include "tpx/core/type_list.hpp"
#include "tpx/io/atomic_file.hpp"
#include "tpx/io/io_error.hpp"

namespace tpx::io {

static_assert(std::endian::native == std::endian::little,
              "tpx::io: safetensors data is little-endian and tpx copies elements as they lie in "
              "memory, so it needs a little-endian host");
static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable_v<bf16>,
              "tpx::io: tpx::bf16 must be exactly the 2 bytes of a BF16 value");

enum class dtype { f32, bf16 };

constexpr std::size_t dtype_size(dtype t) { return t == dtype::f32 ? 4 : 2; }
constexpr const char* dtype_name(dtype t) { return t == dtype::f32 ? "F32" : "BF16"; }

namespace detail {
template <class T>
constexpr dtype dtype_for() {
  if constexpr (std::is_same_v<T, float>) {
    return dtype::f32;
  } else if constexpr (std::is_same_v<T, bf16>) {
    return dtype::bf16;
  } else {
    static_assert(always_false_v<T>,
                  "tpx: safetensors: tpx stores float (F32) and tpx::bf16 (BF16) elements only");
    return dtype::f32;
  }
}
}  // namespace detail

// The dtype of a C++ element type: dtype_of<float> is F32, dtype_of<tpx::bf16> is BF16.
template <class T>
inline constexpr dtype dtype_of = detail::dtype_for<T>();

using metadata_map = std::map<std::string, std::string>;

// A tensor to write: its bytes in row-major order.
struct tensor_bytes {
  std::string name;
  io::dtype dtype = dtype::f32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;
};

// One tensor of a file's header.
struct tensor_info {
  std::string name;
  io::dtype dtype = dtype::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // data_offsets, counted from the start of the byte buffer
  std::uint64_t end = 0;
};

// A file's header, checked.
struct safetensors_header {
  std::filesystem::path file;
  std::uint64_t data_start = 0;      // where the byte buffer starts in the file: 8 + N
  std::vector<tensor_info> tensors;  // ordered by data_offsets
  metadata_map metadata;

  const tensor_info& tensor(const std::string& name) const {
    for (const tensor_info& t : tensors)
      if (t.name == name) return t;
    throw io_error("tpx: " + file.string() + ": has no tensor '" + name + "'");
  }
};

inline constexpr std::uint64_t max_header_bytes = 100'000'000;  // the reference reader's limit

namespace detail {
inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// The number of elements of a shape; false if a size is negative or the count overflows.
inline bool checked_element_count(const std::vector<std::int64_t>& shape, std::uint64_t& count) {
  count = 1;
  for (std::int64_t e : shape)
    if (e < 0 || __builtin_mul_overflow(count, static_cast<std::uint64_t>(e), &count)) return false;
  return true;
}
}  // namespace detail

// Writes a safetensors file through sink.write(std::span<const std::byte>) (a file_sink of
// write_atomically, say).
template <class Sink>
void write_safetensors(Sink& sink, std::vector<tensor_bytes> tensors,
                       const metadata_map& metadata) {
  // A total order while the names differ (a repeated name is refused below), so std::sort.
  std::sort(tensors.begin(), tensors.end(), [](const tensor_bytes& a, const tensor_bytes& b) {
    if (dtype_size(a.dtype) != dtype_size(b.dtype))
      return dtype_size(a.dtype) > dtype_size(b.dtype);
    return a.name < b.name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  std::set<std::string> names;
  for (const tensor_bytes& t : tensors) {
    std::uint64_t count = 0;
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
      throw std::invalid_argument("tpx: safetensors: tensor name '" + t.name +
                                  "' is empty, reserved or used twice");
    if (!detail::checked_element_count(t.shape, count) ||
        count * dtype_size(t.dtype) != t.data.size())
      throw std::invalid_argument("tpx: safetensors: tensor '" + t.name + "' of shape " +
                                  detail::shape_string(t.shape) + " and dtype " +
                                  dtype_name(t.dtype) + " is given " +
                                  std::to_string(t.data.size()) + " bytes");
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::byte length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::byte>(text.size() >> (8 * i));
  sink.write(length);
  sink.write(std::as_bytes(std::span(text)));
  for (const tensor_bytes& t : tensors) sink.write(t.data);
}

namespace detail {
[[noreturn]] inline void bad_header(const std::filesystem::path& file, const std::string& why) {
  throw io_error("tpx: " + file.string() + ": not a valid safetensors file: " + why);
}

// Parses JSON text, reporting the first key that repeats within one object.
inline nlohmann::json parse_without_duplicates(const std::string& text,
                                               const std::filesystem::path& file) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto watch = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using event_t = nlohmann::json::parse_event_t;
    if (event == event_t::object_start) open_objects.emplace_back();
    if (event == event_t::object_end) open_objects.pop_back();
    if (event == event_t::key && !open_objects.back().insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, watch);
  } catch (const nlohmann::json::exception& e) {
    bad_header(file, std::string("the header is not JSON (") + e.what() + ")");
  }
  if (!duplicate.empty()) bad_header(file, "the header has the key '" + duplicate + "' twice");
  return header;
}

inline tensor_info parse_tensor(const std::string& name, const nlohmann::json& entry,
                                const std::filesystem::path& file) {
  const std::string where = "tensor '" + name + "': ";
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets"))
    bad_header(file, where + "expected an object with dtype, shape and data_offsets");
  tensor_info info;
  info.name = name;
  const nlohmann::json& type = entry["dtype"];
  if (type == "F32")
    info.dtype = dtype::f32;
  else if (type == "BF16")
    info.dtype = dtype::bf16;
  else
    bad_header(file, where + "dtype " + type.dump() + " is not one tpx reads (F32, BF16)");
  const nlohmann::json& shape = entry["shape"];
  if (!shape.is_array()) bad_header(file, where + "shape is not an array");
  for (const nlohmann::json& e : shape) {
    if (!e.is_number_unsigned() || e.get<std::uint64_t>() > (std::uint64_t{1} << 62))
      bad_header(file, where + "shape " + shape.dump() + " is not a list of sizes");
    info.shape.push_back(e.get<std::int64_t>());
  }
  const nlohmann::json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned() ||
      offsets[0].get<std::uint64_t>() > offsets[1].get<std::uint64_t>())
    bad_header(file,
               where + "data_offsets " + offsets.dump() + " is not [begin, end] with begin <= end");
  info.begin = offsets[0].get<std::uint64_t>();
  info.end = offsets[1].get<std::uint64_t>();
  std::uint64_t count = 0, bytes = 0;
  if (!checked_element_count(info.shape, count) ||
      __builtin_mul_overflow(count, dtype_size(info.dtype), &bytes))
    bad_header(file, where + "shape " + shape.dump() + " overflows 64 bits");
  if (bytes != info.end - info.begin)
    bad_header(file, where + "shape " + shape.dump() + " of " + dtype_name(info.dtype) + " needs " +
                         std::to_string(bytes) + " bytes but data_offsets " + offsets.dump() +
                         " span " + std::to_string(info.end - info.begin));
  return info;
}
}  // namespace detail

// Reads and checks the header of a safetensors file (not its data).
inline safetensors_header read_safetensors_header(const std::filesystem::path& file) {
  std::error_code error;
  const std::uint64_t size = std::filesystem::file_size(file, error);
  if (error) throw io_error("tpx: " + file.string() + ": cannot read: " + error.message());
  if (size < 8)
    detail::bad_header(
        file, "it has " + std::to_string(size) + " bytes, fewer than the 8 of the header length");
  std::byte length[8];
  read_file_range(file, 0, length);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(length[i]);
  if (n > max_header_bytes)
    detail::bad_header(file, "header length " + std::to_string(n) + " exceeds the limit of " +
                                 std::to_string(max_header_bytes) + " bytes");
  if (8 + n > size)
    detail::bad_header(file, "header length " + std::to_string(n) + " runs past the end of the " +
                                 std::to_string(size) + "-byte file (truncated?)");
  std::string text(n, '\0');
  read_file_range(file, 8, std::as_writable_bytes(std::span(text)));
  if (text.empty() || text[0] != '{')
    detail::bad_header(file, "the header does not start with '{'");
  const nlohmann::json json = detail::parse_without_duplicates(text, file);
  if (!json.is_object()) detail::bad_header(file, "the header is not a JSON object");

  safetensors_header header{file, 8 + n, {}, {}};
  for (const auto& [key, value] : json.items()) {
    if (key != "__metadata__") {
      header.tensors.push_back(detail::parse_tensor(key, value, file));
      continue;
    }
    if (!value.is_object()) detail::bad_header(file, "__metadata__ is not an object");
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string())
        detail::bad_header(file, "__metadata__ value of '" + k + "' is not a string");
      header.metadata[k] = v.get<std::string>();
    }
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const tensor_info& a, const tensor_info& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  std::uint64_t covered = 0;
  const tensor_info* previous = nullptr;
  for (const tensor_info& t : header.tensors) {
    if (t.begin < covered)
      detail::bad_header(file, "the data of tensor '" + t.name + "' overlaps that of tensor '" +
                                   previous->name + "'");
    if (t.begin > covered)
      detail::bad_header(file, "bytes [" + std::to_string(covered) + ", " +
                                   std::to_string(t.begin) + ") before tensor '" + t.name +
                                   "' belong to no tensor");
    covered = t.end;
    previous = &t;
  }
  if (header.data_start + covered != size)
    detail::bad_header(file, "the tensors index " + std::to_string(covered) +
                                 " bytes of data but the file holds " +
                                 std::to_string(size - header.data_start) +
                                 (header.data_start + covered > size ? " (truncated?)" : ""));
  return header;
}

// Elements [first, first + out.size()) of tensor info (in row-major order), read from the file.
template <class T>
void read_elements(const safetensors_header& header, const tensor_info& info, std::uint64_t first,
                   std::span<T> out) {
  if (info.dtype != dtype_of<T>)
    throw io_error("tpx: " + header.file.string() + ": tensor '" + info.name + "' is " +
                   dtype_name(info.dtype) + ", not the " + dtype_name(dtype_of<T>) + " asked for");
  const std::uint64_t count = (info.end - info.begin) / sizeof(T);
  if (first > count || out.size() > count - first)
    throw std::out_of_range("tpx: " + header.file.string() + ": tensor '" + info.name + "' has " +
                            std::to_string(count) + " elements; elements [" +
                            std::to_string(first) + ", " + std::to_string(first + out.size()) +
                            ") were asked for");
  read_file_range(header.file, header.data_start + info.begin + first * sizeof(T),
                  std::as_writable_bytes(out));
}

}  // namespace tpx::io

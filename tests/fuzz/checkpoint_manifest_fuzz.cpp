// libFuzzer harness of the checkpoint manifest reader (tpx::io::checkpoint_reader's constructor
// and verify_files, include/tpx/io/checkpoint_reader.hpp): every input, written as a step's
// manifest.json, must either be read or be refused with tpx::io::io_error. Any other exception,
// a crash or undefined behaviour (the build adds ASan and UBSan) is a bug the fuzzer reports.
// Each input is tried twice: as it is, and, when it is a JSON object, with its manifest_xxh64
// set to its true checksum, since otherwise the checksum would refuse almost every input before
// the fields behind it (files, tensors, blocks) are looked at. The rank files are absent, so
// verify_files must refuse a manifest that names any. Seeds: tests/fuzz/corpus/checkpoint_manifest
// (a manifest written by tpx's checkpoint writer, and variants).
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_folder.hpp"
#include "tpx/io/checkpoint_layout.hpp"
#include "tpx/io/checkpoint_reader.hpp"
#include "tpx/io/io_error.hpp"

namespace {

// Writes text as the manifest of `step` under dir and reads it back with checkpoint_reader.
void read_manifest(const std::filesystem::path& dir, std::int64_t step, const std::string& text) {
  const std::filesystem::path folder = tpx::io::step_folder(dir, step);
  std::filesystem::create_directories(folder);
  {
    std::ofstream out(folder / "manifest.json", std::ios::binary | std::ios::trunc);
    out << text;
  }
  try {
    tpx::io::checkpoint_reader reader(dir, step);
    (void)reader.run_id();
    reader.verify_files();
  } catch (const tpx::io::io_error&) {
    // refused with a message: what a damaged or edited manifest must get
  }
  std::filesystem::remove_all(folder);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fuzz_folder folder("manifest");
  const std::filesystem::path& dir = folder.path();
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json manifest = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  // The step the manifest claims, when it is one a folder can be named after; else step 0.
  std::int64_t step = 0;
  if (manifest.is_object() && manifest.contains("step") && manifest["step"].is_number_unsigned() &&
      manifest["step"].get<std::uint64_t>() < 1'000'000)
    step = manifest["step"].get<std::int64_t>();
  read_manifest(dir, step, text);
  if (manifest.is_object()) {
    manifest[tpx::io::manifest_checksum_key] =
        tpx::io::to_hex(tpx::io::manifest_checksum(manifest));
    read_manifest(dir, step, manifest.dump());
  }
  return 0;
}

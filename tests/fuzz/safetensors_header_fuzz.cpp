// libFuzzer harness of the safetensors reader (tpx::io::read_safetensors_header and
// read_elements, include/tpx/io/safetensors.hpp): every input, written as a file, must either
// be read or be refused with tpx::io::io_error. Any other exception, a crash, a read out of
// bounds or undefined behaviour (the build adds ASan and UBSan) is a bug the fuzzer reports.
// Of a header that reads, the first and the last element of every tensor are read back too.
// Seeds: tests/fuzz/corpus/safetensors_header (a valid file, made by tpx's writer, and variants).
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <span>

#include "fuzz_folder.hpp"
#include "tpx/io/io_error.hpp"
#include "tpx/io/safetensors.hpp"

namespace {

// Reads one element at `index` of a tensor, in its own dtype.
void read_one(const tpx::io::safetensors_header& header, const tpx::io::tensor_info& t,
              std::uint64_t index) {
  if (t.dtype == tpx::io::dtype::f32) {
    float value;
    tpx::io::read_elements(header, t, index, std::span(&value, 1));
  } else {
    tpx::bf16 value;
    tpx::io::read_elements(header, t, index, std::span(&value, 1));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fuzz_folder folder("safetensors");
  const std::filesystem::path file = folder.path() / "input.safetensors";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const tpx::io::safetensors_header header = tpx::io::read_safetensors_header(file);
    for (const tpx::io::tensor_info& t : header.tensors) {
      const std::uint64_t count = (t.end - t.begin) / tpx::io::dtype_size(t.dtype);
      if (count == 0) continue;
      read_one(header, t, 0);
      read_one(header, t, count - 1);
    }
  } catch (const tpx::io::io_error&) {
    // refused with a message: what a damaged file must get
  }
  return 0;
}

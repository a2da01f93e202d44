// io_error: what tpx's file code throws when a file cannot be written, read or trusted.
//
// A checkpoint is read long after it was written, often on another machine, so the message of
// every failure names the file and, where one is involved, the tensor, and says what was expected
// and what was found: "tpx: ckpt/step-00000040/rank-3.safetensors: checksum mismatch (manifest
// says xxh64 0123..., file has 4567...)". One type for all of them lets a trainer catch "the
// checkpoint is unusable" without caring which check failed.
#pragma once

#include <stdexcept>

namespace tpx::io {

class io_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tpx::io

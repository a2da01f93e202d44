// build_fingerprint: what every process of one job must agree on before its first collective,
// as named fields, so that a node running a stale binary, or a rank given another mesh, fails at
// start with a message naming the field instead of hanging or corrupting data mid-run.
//
// The common fields are the mesh (axis names and sizes), the compiler that built tpx into the
// program and its language level, the build options that change what tpx compiles to (NDEBUG,
// fast math), and the sizes of the types that cross between processes. Each launcher adds what
// its transport must share: the NCCL launch the CUDA runtime and NCCL versions
// (cuda/nccl_launch.hpp, compared by the TCP rendezvous, launch/tcp_rendezvous.hpp), the MPI
// launcher the MPI library that each process loaded (spmd/mpi_fingerprint.hpp, compared field by
// field over MPI). fingerprint_text writes the fields as one line, "mesh X=2, Y=2; compiler g++
// 12.2.0; ..."; a newline inside a value becomes a space, so that a line always holds one
// fingerprint.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tpx {

struct fingerprint_field {
  std::string name;   // "mesh"
  std::string value;  // "X=2, Y=2"
};

// The fields every launcher compares, for a program about to run `mesh` (Mesh::to_string()).
inline std::vector<fingerprint_field> build_fingerprint(const std::string& mesh) {
#if defined(__clang__)
  const std::string compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  const std::string compiler = std::string("g++ ") + __VERSION__;
#else
  const std::string compiler = "an unknown compiler";
#endif
#ifdef NDEBUG
  std::string options = "NDEBUG";
#else
  std::string options = "assertions";
#endif
#ifdef __FAST_MATH__
  options += ", fast math";
#endif
  return {{"mesh", mesh},
          {"compiler", compiler},
          {"C++", std::to_string(__cplusplus)},
          {"build options", options},
          {"type sizes", "pointer " + std::to_string(sizeof(void*)) + ", size_t " +
                             std::to_string(sizeof(std::size_t)) + ", long double " +
                             std::to_string(sizeof(long double))}};
}

// "mesh X=2, Y=2; compiler g++ 12.2.0; ..." (see the top of the file).
inline std::string fingerprint_text(const std::vector<fingerprint_field>& fields) {
  std::string text;
  for (const fingerprint_field& field : fields) {
    if (!text.empty()) text += "; ";
    text += field.name;
    text += ' ';
    for (char c : field.value) text += c == '\n' ? ' ' : c;
  }
  return text;
}

}  // namespace tpx

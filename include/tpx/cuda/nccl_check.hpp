// NCCL's side of error handling and typing: TPX_NCCL_CHECK for the calls that need no
// communicator context (ncclGetUniqueId, group start/end outside a communicator), the error
// type, and nccl_type<T>, the ncclDataType_t of a C++ element type, so that a collective's
// datatype always follows from its buffers and can never disagree with them (nccl_type_name<T>
// names it in messages).
//
// Calls on a communicator go through NcclCommunicator::check (nccl_communicator.hpp), which
// also waits out the nonblocking mode's ncclInProgress and can abort the communicator.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include "tpx/comm/communicator.hpp"
#include "tpx/core/bfloat16.hpp"

namespace tpx::cuda {

// An NCCL failure. A comm_error, so that the SPMD launchers treat it like a failed collective.
class nccl_error : public comm_error {
 public:
  using comm_error::comm_error;
};

namespace detail {
inline std::string nccl_message(ncclResult_t status, const char* call, const char* file, int line) {
  return "tpx: " + std::string(call) + " failed: " + ncclGetErrorString(status) + " (" + file + ":" +
         std::to_string(line) + ")";
}
inline void check_nccl(ncclResult_t status, const char* call, const char* file, int line) {
  if (status != ncclSuccess) throw nccl_error(nccl_message(status, call, file, line));
}
}  // namespace detail

template <class T>
inline constexpr bool has_nccl_type =
    std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, bf16> || std::same_as<T, __half> ||
    std::same_as<T, __nv_bfloat16> || std::same_as<T, std::int8_t> || std::same_as<T, std::uint8_t> ||
    std::same_as<T, std::int32_t> || std::same_as<T, std::uint32_t> || std::same_as<T, std::int64_t> ||
    std::same_as<T, std::uint64_t>;

template <class T>
concept NcclElement = has_nccl_type<T>;

// tpx::bf16 has the bits of __nv_bfloat16 (the top half of an fp32), so both are ncclBfloat16.
template <NcclElement T>
inline constexpr ncclDataType_t nccl_type = std::same_as<T, float>                                        ? ncclFloat32
                                            : std::same_as<T, double>                                     ? ncclFloat64
                                            : std::same_as<T, bf16> || std::same_as<T, __nv_bfloat16>     ? ncclBfloat16
                                            : std::same_as<T, __half>                                     ? ncclFloat16
                                            : std::same_as<T, std::int8_t>                                ? ncclInt8
                                            : std::same_as<T, std::uint8_t>                               ? ncclUint8
                                            : std::same_as<T, std::int32_t>                               ? ncclInt32
                                            : std::same_as<T, std::uint32_t>                              ? ncclUint32
                                            : std::same_as<T, std::int64_t>                               ? ncclInt64
                                                                                                          : ncclUint64;

// The element type's name in messages and in the signature records (comm/call_record.hpp):
// "float", "bf16", ..., at most 8 letters; tpx::bf16 and __nv_bfloat16 are one type to NCCL.
template <NcclElement T>
inline constexpr std::string_view nccl_type_name = std::same_as<T, float>                                    ? "float"
                                                   : std::same_as<T, double>                                 ? "double"
                                                   : std::same_as<T, bf16> || std::same_as<T, __nv_bfloat16> ? "bf16"
                                                   : std::same_as<T, __half>                                 ? "half"
                                                   : std::same_as<T, std::int8_t>                            ? "int8"
                                                   : std::same_as<T, std::uint8_t>                           ? "uint8"
                                                   : std::same_as<T, std::int32_t>                           ? "int32"
                                                   : std::same_as<T, std::uint32_t>                          ? "uint32"
                                                   : std::same_as<T, std::int64_t>                           ? "int64"
                                                                                                             : "uint64";

static_assert(sizeof(bf16) == 2 && sizeof(__nv_bfloat16) == 2, "tpx::bf16 must be NCCL's 16-bit bfloat16");

}  // namespace tpx::cuda

#define TPX_NCCL_CHECK(call) ::tpx::cuda::detail::check_nccl((call), #call, __FILE__, __LINE__)
